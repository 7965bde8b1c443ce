"""The machines behind moto's instances: one ``corral-agent`` process per running instance
Corral launched, stopped when the instance goes.

moto boots instances at once, so an agent starts ``boot_delay_s`` after its instance is first
seen running, like a real boot. Its identity (instance id, type, zone, spot or not, pool and
record tags) comes from ``DescribeInstances``, its fake GPUs from the catalog, its bearer
token from ``mint_agent_token``. A terminated instance is a machine that vanished: the agent
and its trials are killed outright; graceful stops only happen through interruption notices
(``faults.interrupt``), as on EC2. A stopped instance (the warm pool) is a machine powered
off: its agent is killed the same way, its directory (the disk) stays, and when the instance
runs again a fresh agent boots ``boot_delay_s`` later and registers again, as after a
launch. The emulator also plays EC2's part in EventBridge: terminations it sees (and those
it performs when a notice window ends) are published as "EC2 Instance State-change
Notification" events.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from corral.api.auth import mint_agent_token
from corral.domain.catalog import gpus_for
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.local import faults
from corral.local.loops import run_until_stopped
from corral.local.proctree import stop_tree
from corral.local.state import StateDir

log = logging.getLogger(__name__)

_LIVE = ("pending", "running")
_POWERED_OFF = ("stopping", "stopped")


@dataclass(frozen=True)
class EmulatorSettings:
    api_url: str
    agent_secret: bytes
    ownership: tuple[tuple[str, str], ...]  # (tag key, tag value) of every pool
    boot_delay_s: float = 2.0
    poll_s: float = 1.0
    # Merged into every agent's config (the dev stack shortens the agent's timers here).
    agent_settings: dict[str, Any] = field(default_factory=dict)
    # The agents' environment: the developer's, never the stack's secrets or AWS settings
    # (trials inherit it from the process executor).
    agent_env: dict[str, str] | None = None


def agent_config(
    instance: dict[str, Any], settings: EmulatorSettings, state: StateDir
) -> dict[str, Any]:
    tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
    instance_id = instance["InstanceId"]
    gpus = gpus_for("aws", instance["InstanceType"]) or 0
    spot = instance.get("InstanceLifecycle") == "spot"
    base = state.agent_dir(instance_id)
    return {
        "api_url": settings.api_url,
        "auth": "dev",
        "cloud": "dev",
        "dev_token": mint_agent_token(settings.agent_secret, instance_id),
        "dev_instance_id": instance_id,
        "dev_instance_type": instance["InstanceType"],
        "dev_zone": (instance.get("Placement") or {}).get("AvailabilityZone", "local"),
        "dev_capacity_type": "spot" if spot else "on-demand",
        "dev_notice_file": str(state.notice_file(instance_id)),
        "pool": tags.get(POOL_TAG, "default"),
        "record_id": tags.get(RECORD_TAG),
        "fake_gpus": gpus,
        "expected_gpus": gpus,
        "work_dir": str(base / "work"),
        "executor": "process",
        # The agent's dead man's switch "shuts the machine down": here, the agent itself
        # (its parent is the shell the switch runs), never the developer's computer.
        "shutdown_command": ["sh", "-c", "kill -TERM $PPID"],
        **settings.agent_settings,
    }


@dataclass
class _Agent:
    instance_id: str
    proc: subprocess.Popen[bytes]
    started_at: float


class InstanceEmulator:
    def __init__(
        self, state: StateDir, session: Any, settings: EmulatorSettings, stop: threading.Event
    ) -> None:
        self._state = state
        self._session = session
        self._ec2 = session.client("ec2")
        self._settings = settings
        self._stop = stop
        self._first_running: dict[str, float] = {}
        self._known_state: dict[str, str] = {}
        self.agents: dict[str, _Agent] = {}
        self.exited: dict[str, int] = {}  # instance id -> exit code of an agent that quit
        self.launched: set[str] = set()
        self.terminated: set[str] = set()
        self.thread = threading.Thread(target=self._run, name="instance-emulator", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        poll_s = self._settings.poll_s
        run_until_stopped(
            self._stop, self.tick, log, "instance emulator tick", every_s=poll_s, retry_s=poll_s
        )

    # ---- one pass ---------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        instances = self._describe()
        due = faults.due_terminations(self._state)
        terminated = [self._terminate(i, instances.get(i)) for i in due]  # all, not any()
        if True in terminated:
            instances = self._describe()
        for instance_id, instance in instances.items():
            name = instance["State"]["Name"]
            self._observe(instance_id, name)
            if name in _POWERED_OFF:
                self._power_off(instance_id, name)
        for instance_id, instance in instances.items():
            if instance["State"]["Name"] != "running" or instance_id in self.agents:
                continue
            if instance_id in self.exited:
                continue  # the agent quit on its own (refused, unhealthy): as systemd does
            first = self._first_running.setdefault(instance_id, now)
            if now - first >= self._settings.boot_delay_s:
                self._start_agent(instance)
        for instance_id in list(self.agents):
            name = instances.get(instance_id, {}).get("State", {}).get("Name", "terminated")
            if name not in _LIVE:
                self._kill_agent(instance_id, f"instance {name}")
        self._reap_exited()

    def _terminate(self, instance_id: str, instance: dict[str, Any] | None) -> bool:
        """The end of a notice window: EC2 takes the instance, unless Corral already has."""
        if instance is None or instance["State"]["Name"] not in _LIVE:
            return False
        log.info("notice window over: terminating %s", instance_id)
        try:
            self._ec2.terminate_instances(InstanceIds=[instance_id])
        except Exception as exc:  # raced with Corral's own termination
            log.info("terminating %s: %s", instance_id, exc)
        return True

    def _describe(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for key, value in self._settings.ownership:
            pages = self._ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": f"tag:{key}", "Values": [value]}]
            )
            for page in pages:
                for reservation in page["Reservations"]:
                    for instance in reservation["Instances"]:
                        found[instance["InstanceId"]] = instance
        return found

    def _observe(self, instance_id: str, name: str) -> None:
        before = self._known_state.get(instance_id)
        self._known_state[instance_id] = name
        if name in _LIVE:
            self.launched.add(instance_id)
        if before == name or name not in ("shutting-down", "terminated", "stopped", "running"):
            return
        if name == "terminated":
            self.terminated.add(instance_id)
        try:
            faults.put_ec2_event(
                self._session,
                faults.STATE_CHANGE,
                instance_id,
                {"instance-id": instance_id, "state": name},
            )
        except Exception as exc:  # the event is a hint; reconcile covers a lost one
            log.warning("could not publish the state change of %s: %s", instance_id, exc)

    def _power_off(self, instance_id: str, name: str) -> None:
        """A stopped machine: its agent dies with it, and the next start is a fresh boot (the
        boot delay again; an agent that had quit on its own boots again too)."""
        self._kill_agent(instance_id, f"instance {name}")
        self._first_running.pop(instance_id, None)
        self.exited.pop(instance_id, None)

    # ---- agents -----------------------------------------------------------------------
    def _start_agent(self, instance: dict[str, Any]) -> None:
        instance_id = instance["InstanceId"]
        config = agent_config(instance, self._settings, self._state)
        directory = self._state.agent_dir(instance_id)
        directory.mkdir(parents=True, exist_ok=True)
        config_file = directory / "agent.yaml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=True))
        config_file.chmod(0o600)  # it holds the agent's token
        log_path = self._state.logs / f"agent-{instance_id}.log"
        with log_path.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agent_runtime.main", "--config", str(config_file)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=directory,
                env=self._settings.agent_env,
                start_new_session=True,  # Ctrl-C goes to the stack, which stops agents itself
            )
        self._state.add_child(proc.pid)
        self.agents[instance_id] = _Agent(instance_id, proc, time.monotonic())
        log.info(
            "instance %s booted: agent pid %d (%s GPUs), log %s",
            instance_id,
            proc.pid,
            config["fake_gpus"],
            log_path,
        )

    def _kill_agent(self, instance_id: str, why: str) -> None:
        agent = self.agents.pop(instance_id, None)
        if agent is None:
            return
        log.info("%s: stopping agent pid %d and its trials", why, agent.proc.pid)
        stop_tree(agent.proc.pid, graceful=False)
        agent.proc.wait(timeout=10)
        self._state.remove_child(agent.proc.pid)

    def _reap_exited(self) -> None:
        for instance_id, agent in list(self.agents.items()):
            code = agent.proc.poll()
            if code is None:
                continue
            log.warning("agent on %s exited with %d; see its log", instance_id, code)
            stop_tree(agent.proc.pid, graceful=False)  # trials it left behind
            self.exited[instance_id] = code
            del self.agents[instance_id]
            self._state.remove_child(agent.proc.pid)

    def stop_all(self, grace_s: float = 3.0) -> None:
        """Stack shutdown: give agents a moment to report (SIGTERM), then kill every tree."""
        for agent in list(self.agents.values()):
            stop_tree(agent.proc.pid, grace_s=grace_s)
            try:
                agent.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("agent pid %d did not exit", agent.proc.pid)
            self._state.remove_child(agent.proc.pid)
        self.agents.clear()
