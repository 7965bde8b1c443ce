"""The firewall rules that keep trials from the metadata service. This sandbox has no
iptables (and no root network namespace to change), so the tests assert the exact commands
the agent runs, through a fake runner; docs/security.md says what was not exercised."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agent_runtime.config import AgentConfig
from agent_runtime.executors.docker import DockerExecutor
from agent_runtime.executors.process import ProcessExecutor
from agent_runtime.main import apply_metadata_guard
from agent_runtime.metadata_guard import GuardError, apply_rules, guard, guard_rules
from agent_runtime.trial_credentials import CredentialServer, TrialRoleSource
from tests.agent.conftest import dev_config
from tests.agent.test_trial_credentials_executors import FakeClient

BRIDGE = ["iptables", "-w", "-t", "filter", "-I", "DOCKER-USER", "-d", "169.254.169.254/32"]
BRIDGE += ["-j", "REJECT"]
HOST = ["iptables", "-w", "-t", "filter", "-I", "OUTPUT", "-d", "169.254.169.254/32"]
HOST += ["-m", "cgroup", "!", "--path", "system.slice", "-j", "REJECT"]


class FakeIptables:
    """Remembers inserted rules; ``-C`` finds them; ``fail`` makes some inserts fail."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.rules: set[tuple[str, ...]] = set()
        self.fail = fail  # inserts of rules naming this match fail

    def __call__(self, argv: Sequence[str]) -> tuple[int, str]:
        argv = list(argv)
        self.calls.append(argv)
        op = argv[4]  # iptables -w -t TABLE OP CHAIN ...
        key = tuple(a for a in argv if a not in ("-C", "-I"))
        if op == "-N":
            return 1, "Chain already exists."
        if op == "-C":
            return (0, "") if key in self.rules else (1, "Bad rule")
        if self.fail and self.fail in argv:
            return 4, "iptables v1.8.8 (nf_tables): Couldn't load match `cgroup'"
        self.rules.add(key)
        return 0, ""


def test_the_rules_for_docker_trials_with_credentials() -> None:
    rules = guard_rules(docker=True, bridge_gateway="172.18.0.1", credentials_port=51680)
    assert [r.command("-I") for r in rules] == [
        BRIDGE,
        HOST,
        [
            *("iptables", "-w", "-t", "nat", "-I", "PREROUTING", "-d", "169.254.170.2/32"),
            *("-p", "tcp", "--dport", "80", "-j", "DNAT"),
            *("--to-destination", "172.18.0.1:51680"),
        ],
    ]


def test_the_rules_for_process_trials() -> None:
    (rule,) = guard_rules(docker=False, process_uid=1000)
    assert rule.command("-I") == [
        *("iptables", "-w", "-t", "filter", "-I", "OUTPUT", "-d", "169.254.169.254/32"),
        *("-m", "owner", "--uid-owner", "1000", "-j", "REJECT"),
    ]
    # As root, a process trial cannot be told from the agent: no rule pretends otherwise.
    assert guard_rules(docker=False, process_uid=0) == []
    assert guard_rules(docker=False) == []


def test_rules_are_applied_once_across_agent_restarts() -> None:
    iptables = FakeIptables()
    rules = guard_rules(docker=True)
    assert apply_rules(rules, iptables) == ([BRIDGE, HOST], [])
    # The DOCKER-USER chain is created first if Docker has not made it yet.
    assert iptables.calls[0] == ["iptables", "-w", "-t", "filter", "-N", "DOCKER-USER"]
    assert apply_rules(rules, iptables) == ([], [])  # a restarted agent adds nothing


def _config(**settings: Any) -> AgentConfig:
    return AgentConfig(api_url="http://cp", auth="aws", **settings)


def test_modes() -> None:
    rules = guard_rules(docker=True)
    assert guard(dev_config(), rules, FakeIptables()) == []  # a developer's machine
    assert guard(_config(cloud="ec2", metadata_guard="off"), rules, FakeIptables()) == []
    gce = _config(cloud="gce")
    assert guard(gce, rules, FakeIptables()) == [BRIDGE, HOST]
    # The local stack's emulated instances: ec2, but their metadata service is on loopback.
    emulated = _config(cloud="ec2", ec2_metadata_url="http://127.0.0.1:8123")
    assert guard(emulated, rules, FakeIptables()) == []
    # auto on a cloud: a rule that fails is logged, the others still apply, the agent goes
    # on; enforce refuses to start.
    assert guard(_config(cloud="ec2"), rules, FakeIptables(fail="cgroup")) == [BRIDGE]
    enforce = _config(cloud="ec2", metadata_guard="enforce")
    with pytest.raises(GuardError, match=r"host-network trials .*Couldn.t load match"):
        guard(enforce, rules, FakeIptables(fail="cgroup"))


def test_the_agent_applies_the_rules_for_its_executor_and_endpoint(tmp_path: Path) -> None:
    config = AgentConfig(api_url="http://cp", auth="aws", cloud="ec2")
    server = CredentialServer(TrialRoleSource("arn:aws:iam::123456789012:role/t", None), port=0)
    server.start()
    try:
        server.listen_on_bridge("127.0.0.3")
        iptables = FakeIptables()
        applied = apply_metadata_guard(
            config, DockerExecutor(config, FakeClient()), server, iptables
        )
        assert applied[:2] == [BRIDGE, HOST]
        assert applied[2][-1] == f"127.0.0.3:{server.port}"
    finally:
        server.close()
    iptables = FakeIptables()
    process = AgentConfig(api_url="http://cp", auth="aws", cloud="ec2", run_as_uid=1000)
    (rule,) = apply_metadata_guard(process, ProcessExecutor(process), None, iptables)
    assert rule[-4:] == ["--uid-owner", "1000", "-j", "REJECT"]
    assert apply_metadata_guard(dev_config(), ProcessExecutor(dev_config()), None, iptables) == []
