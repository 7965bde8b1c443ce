"""Firewall rules that keep every trial away from the instance's identity.

The metadata service (169.254.169.254 on EC2 and GCE) hands out the instance role's
credentials (EC2) or the instance service account's tokens (GCE): with them a trial could
call the control plane's agent routes as this agent, or EC2. Trials get credentials of their
own instead (trial_credentials.py). What stops each kind of trial:

- bridge-network containers: their packets to the metadata service are *forwarded* by the
  host, so a REJECT in Docker's ``DOCKER-USER`` chain (Docker's documented place for user
  rules; it is consulted before Docker's own accept rules) stops them. On EC2 the IMDS hop
  limit of 1 (ec2_params.METADATA_OPTIONS) already keeps the IMDSv2 token's reply from
  reaching them; the rule also covers GCE, whose metadata server has no hop limit.
- host-network containers share the host's network stack: no hop limit or forward rule
  can tell them from the agent, and as uid 0 an ``-m owner`` match cannot either. Trial
  containers run in their own cgroup (``trial_cgroup_parent``, default ``corral.slice``,
  outside ``system.slice``) and the OUTPUT rule rejects metadata traffic from every socket
  whose cgroup is outside ``system.slice``, where systemd runs the agent, Docker, the SSM
  and CloudWatch agents. ``system.slice`` rather than ``corral.slice`` because the cgroup
  match binds to the cgroup that exists when the rule is inserted: systemd removes an
  empty slice and makes a new one, which a rule naming ``corral.slice`` would then miss,
  while ``system.slice`` lives as long as the machine. A side effect, stated in
  docs/security.md: login sessions (``user.slice``) do not reach the metadata service.
- process trials run inside the agent's own service cgroup: when they run as another user
  (``run_as_uid``) an ``-m owner`` rule rejects that uid; as root they are not contained
  (use the Docker executor on cloud instances).
- a DNAT rule sends bridge trials' requests to ECS's credentials address (169.254.170.2:80)
  to the agent's credentials listener on the bridge gateway (see trial_credentials.py).

Rules are applied idempotently (``iptables -C`` before ``-I``), so an agent restart adds
nothing twice. What they rely on is standard on Amazon Linux 2023 (iptables-nft with the
``cgroup`` and ``owner`` matches, cgroup v2, Docker with the systemd cgroup driver and its
``DOCKER-USER`` chain) but was NOT exercised on an instance: the development sandbox has no
iptables, so tests assert the exact commands through a fake runner (docs/security.md).
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent_runtime.config import AgentConfig

log = logging.getLogger(__name__)

METADATA_ADDRESS = "169.254.169.254/32"
ECS_CREDENTIALS = "169.254.170.2/32"
SYSTEM_SLICE = "system.slice"
REAL_METADATA_URLS = {"http://169.254.169.254", "http://metadata.google.internal"}
REJECT = ("-j", "REJECT")

# (argv) -> (exit code, stderr); injected so tests see the commands without running them.
Runner = Callable[[Sequence[str]], tuple[int, str]]


class GuardError(RuntimeError):
    pass


@dataclass(frozen=True)
class Rule:
    table: str
    chain: str
    spec: tuple[str, ...]
    why: str

    def command(self, op: str) -> list[str]:
        return ["iptables", "-w", "-t", self.table, op, self.chain, *self.spec]


def guard_rules(
    *,
    docker: bool,
    process_uid: int | None = None,
    bridge_gateway: str | None = None,
    credentials_port: int | None = None,
) -> list[Rule]:
    """The rules for this agent: ``docker`` when trials run in containers, ``process_uid``
    the uid process trials run as, ``bridge_gateway``/``credentials_port`` where the
    credentials listener for bridge trials is (None: no DNAT)."""
    rules: list[Rule] = []
    if docker:
        rules.append(
            Rule(
                "filter",
                "DOCKER-USER",
                ("-d", METADATA_ADDRESS, *REJECT),
                "bridge-network trials",
            )
        )
        rules.append(
            Rule(
                "filter",
                "OUTPUT",
                ("-d", METADATA_ADDRESS, "-m", "cgroup", "!", "--path", SYSTEM_SLICE, *REJECT),
                "host-network trials (their cgroup is outside system.slice)",
            )
        )
    if process_uid is not None and process_uid != 0:
        rules.append(
            Rule(
                "filter",
                "OUTPUT",
                ("-d", METADATA_ADDRESS, "-m", "owner", "--uid-owner", str(process_uid), *REJECT),
                "process trials running as their own user",
            )
        )
    if bridge_gateway and credentials_port:
        target = ("--to-destination", f"{bridge_gateway}:{credentials_port}")
        rules.append(
            Rule(
                "nat",
                "PREROUTING",
                ("-d", ECS_CREDENTIALS, "-p", "tcp", "--dport", "80", "-j", "DNAT", *target),
                "bridge trials' credentials endpoint",
            )
        )
    return rules


def apply_rules(rules: Sequence[Rule], run: Runner) -> tuple[list[list[str]], list[str]]:
    """Insert each rule that is not there yet. Returns the commands that changed something
    and one line per rule that could not be applied (the others are applied regardless)."""
    applied: list[list[str]] = []
    problems: list[str] = []
    for rule in rules:
        if rule.chain == "DOCKER-USER":
            # Docker creates it when it starts; create it first if the agent is earlier
            # (Docker keeps an existing chain and adds its jump to it).
            run(["iptables", "-w", "-t", rule.table, "-N", rule.chain])
        code, _ = run(rule.command("-C"))
        if code == 0:
            continue
        insert = rule.command("-I")
        code, err = run(insert)
        if code != 0:
            problems.append(f"cannot apply the rule for {rule.why} ({' '.join(insert)}): {err}")
        else:
            applied.append(insert)
    return applied, problems


def run_command(argv: Sequence[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stderr.strip()


def active(config: AgentConfig) -> bool:
    """Whether the guard applies: ``auto`` on cloud instances only, told by the metadata
    service being the real link-local one. A developer's machine (``dev``, or the local
    stack's emulated instances, whose metadata service is on loopback) keeps its firewall
    and its Docker cgroups as they are."""
    if config.metadata_guard != "auto":
        return config.metadata_guard == "enforce"
    cloud = config.resolved_cloud
    url = config.ec2_metadata_url if cloud == "ec2" else config.gce_metadata_url
    return cloud in ("ec2", "gce") and url.rstrip("/") in REAL_METADATA_URLS


def guard(config: AgentConfig, rules: Sequence[Rule], run: Runner = run_command) -> list[list[str]]:
    """Apply the rules as ``metadata_guard`` says: ``off`` never; ``auto`` on ec2/gce,
    logging each rule that cannot be applied; ``enforce`` always, raising GuardError if
    any cannot."""
    if not active(config):
        return []
    applied, problems = apply_rules(rules, run)
    if problems and config.metadata_guard == "enforce":
        raise GuardError("; ".join(problems))
    for problem in problems:
        log.error("%s: trials may reach the instance's metadata service", problem)
    for command in applied:
        log.info("metadata guard: %s", " ".join(command))
    return applied
