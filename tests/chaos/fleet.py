"""The machines behind moto's instances, as the local stack's instance emulator runs them,
plus what EC2 and the machines do to Corral: boots that never register, spot interruptions
with and without the two-minute warning, agents that die for good, agents systemd restarts,
silences. It also plays EC2's part in EventBridge (warnings and state changes go to the
interruptions queue) and records every instance's life for the invariants."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_runtime.agent import EXIT_DEADMAN, EXIT_OK, EXIT_REFUSED, EXIT_UNHEALTHY
from agent_runtime.identity import Notice
from corral.domain.catalog import gpus_for
from corral.domain.ownership import RECORD_TAG
from corral.ports.queue import QueueName
from tests.chaos.agent_host import Machine, start_agent
from tests.chaos.aws import TAG_KEY, TAG_VALUE, World
from tests.chaos.config import SoakConfig
from tests.chaos.lambdas import Gateway, ec2_event
from tests.chaos.mailbox import Mailbox
from tests.chaos.trials import Ledger
from tests.lambda_events import SPOT_WARNING, STATE_CHANGE

LIVE = ("pending", "running")
NOTICE_S = 120.0
NO_RESTART = (EXIT_OK, EXIT_UNHEALTHY, EXIT_REFUSED, EXIT_DEADMAN)  # systemd's unit


@dataclass
class Life:
    cloud_id: str
    record_id: str | None
    first_seen: float
    gone_at: float | None = None
    registered_agent: bool = False


class Fleet:
    def __init__(
        self,
        cfg: SoakConfig,
        world: World,
        gateway: Gateway,
        mailbox: Mailbox,
        ledger: Ledger,
        work_root: Path,
    ) -> None:
        self.cfg, self.world, self.gateway, self.mailbox = cfg, world, gateway, mailbox
        self.ledger, self.work_root = ledger, work_root
        self.clock = world.clock
        self.rng = random.Random(cfg.seed * 31 + 3)
        self.drop_rng = random.Random(cfg.seed * 37 + 5)
        self.machines: dict[str, Machine] = {}
        self.lives: dict[str, Life] = {}
        self.faults: Counter[str] = Counter()
        self.agent_errors: Counter[str] = Counter()
        self.max_live = 0
        self.terminate_at: dict[str, float] = {}
        # (fault kind, instance, trials running there): to tell which faults were absorbed.
        self.touched: list[tuple[str, str, frozenset[str]]] = []

    # ---- one step -----------------------------------------------------------------------
    def step(self) -> None:
        now = self.clock.now()
        for cloud_id in [i for i, t in self.terminate_at.items() if t <= now]:
            del self.terminate_at[cloud_id]
            self.world.terminate(cloud_id)  # the notice window is over: EC2 takes it
        ours = self._describe_ours()
        self.max_live = max(self.max_live, sum(1 for i in ours.values() if _state(i) in LIVE))
        for cloud_id, instance in ours.items():
            self._observe(cloud_id, instance, now)
        for machine in list(self.machines.values()):
            if not machine.gone:
                self._run(machine, now)
        self._inject(now)

    def live_ours(self) -> int:
        return sum(1 for i in self._describe_ours().values() if _state(i) in LIVE)

    def _describe_ours(self) -> dict[str, dict[str, Any]]:
        out = {}
        for cloud_id, instance in self.world.describe().items():
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
            if tags.get(TAG_KEY) == TAG_VALUE:
                out[cloud_id] = instance
        return out

    def _observe(self, cloud_id: str, instance: dict[str, Any], now: float) -> None:
        state = _state(instance)
        machine = self.machines.get(cloud_id)
        if machine is None and state in LIVE:
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
            itype = instance["InstanceType"]
            machine = Machine(
                cloud_id=cloud_id,
                instance_type=itype,
                spot=instance.get("InstanceLifecycle") == "spot",
                record_id=tags.get(RECORD_TAG),
                private_ip=instance.get("PrivateIpAddress") or "10.0.0.1",
                gpus=gpus_for("aws", itype) or 0,
                zone=(instance.get("Placement") or {}).get("AvailabilityZone", "us-east-1a"),
                boot_at=now + self.rng.uniform(20.0, 60.0),
            )
            rate = self.cfg.rates.noregister if self.cfg.on("noregister") else 0.0
            machine.never_registers = self.rng.random() < rate
            if machine.never_registers:
                self._touch("noregister", machine)
            self.machines[cloud_id] = machine
            self.lives[cloud_id] = Life(cloud_id, machine.record_id, now)
        if machine is not None and state not in LIVE and not machine.gone:
            self._vanish(machine, now, "instance-gone")
            self.lives[cloud_id].gone_at = now
            event = ec2_event(STATE_CHANGE, cloud_id, now, state=state)
            self.mailbox.put_event(QueueName.INTERRUPTIONS, event)

    def _vanish(self, machine: Machine, now: float, how: str) -> None:
        machine.gone = True
        if machine.executor is not None:
            machine.executor.kill_all(how)
        machine.agent = None

    def _run(self, machine: Machine, now: float) -> None:
        if machine.agent is None:
            if machine.dead or machine.never_registers or now < machine.boot_at:
                return
            self._start(machine)
        agent = machine.agent
        assert agent is not None
        try:
            agent.run_once()
        except Exception as exc:  # the agent process crashed: systemd restarts it
            self.agent_errors[f"{type(exc).__name__}: {exc}"[:160]] += 1
            self._restart(machine, "agent-crash")
            return
        if agent.agent_id is not None:
            self.lives[machine.cloud_id].registered_agent = True
        if agent.exit_code is not None:
            machine.exits.append(agent.exit_code)
            if machine.executor is not None:
                machine.executor.kill_all("agent-exit")  # systemd: KillMode=mixed
            machine.agent = None
            if agent.exit_code in NO_RESTART:
                machine.dead, machine.dead_at = True, now

    def _start(self, machine: Machine) -> None:
        def shutdown(command: list[str]) -> int:  # the dead man's switch / a 409
            self.faults["agent_shutdown_command"] += 1
            self.world.terminate(machine.cloud_id)
            return 0

        start_agent(
            machine,
            gateway=self.gateway,
            clock=self.clock,
            ledger=self.ledger,
            rng=self.rng,
            work_root=self.work_root,
            drops=self._drop,
            shutdown=shutdown,
        )

    def _restart(self, machine: Machine, how: str) -> None:
        """systemd starts a fresh agent process; the trials the old one started run on
        (containers belong to the Docker daemon) until the new one deals with them."""
        machine.agent = None
        self.faults[f"restarted ({how})"] += how != "agent-restart"
        self._start(machine)

    def _drop(self) -> str:
        if not self.cfg.on("heartbeat_drop"):
            return ""
        if self.drop_rng.random() >= self.cfg.rates.heartbeat_drop:
            return ""
        self.faults["heartbeat_drop"] += 1
        return "request" if self.drop_rng.random() < 0.5 else "reply"

    # ---- injected faults ----------------------------------------------------------------
    def _hazard(self, kind: str, per_hour: float) -> bool:
        # Drawn whether the kind is on or not, so turning one kind off leaves the others'
        # draws where they were (a violation can be attributed by subtraction).
        hit = self.rng.random() < per_hour * self.cfg.step_s / 3600.0
        return self.cfg.on(kind) and hit

    def _inject(self, now: float) -> None:
        r = self.cfg.rates
        for machine in list(self.machines.values()):
            if machine.gone or machine.cloud_id in self.terminate_at:
                continue
            if machine.spot and self._hazard("spot", r.spot_per_hour):
                self._touch("spot", machine)
                machine.notice = Notice("spot-interruption", NOTICE_S)
                warning = ec2_event(
                    SPOT_WARNING, machine.cloud_id, now, **{"instance-action": "terminate"}
                )
                self.mailbox.put_event(QueueName.INTERRUPTIONS, warning)
                self.terminate_at[machine.cloud_id] = now + NOTICE_S
            elif machine.spot and self._hazard("spot_nowarn", r.spot_nowarn_per_hour):
                self._touch("spot_nowarn", machine)
                self.world.terminate(machine.cloud_id)
            if machine.agent is None:
                continue
            if self._hazard("agent_kill", r.agent_kill_per_hour):
                self._touch("agent_kill", machine)
                machine.dead, machine.dead_at = True, now
                self._vanish_agent(machine)
            elif self._hazard("agent_restart", r.agent_restart_per_hour):
                self._touch("agent_restart", machine)
                self._restart(machine, "agent-restart")
            elif self._hazard("heartbeat_drop", r.silence_per_hour):
                self._touch("heartbeat_silence", machine)
                machine.silent_until = now + self.rng.uniform(30.0, 150.0)
                machine.silences += 1

    def _touch(self, kind: str, machine: Machine) -> None:
        self.faults[kind] += 1
        running = frozenset(
            e.trial_id for e in self.ledger.runs if e.cloud_id == machine.cloud_id and e.end is None
        )
        self.touched.append((kind, machine.cloud_id, running))

    def fates(self) -> dict[str, str]:
        out = {}
        for cloud_id, m in self.machines.items():
            if m.never_registers:
                out[cloud_id] = "never-registered"
            elif m.dead_at is not None:
                out[cloud_id] = f"silent-since:{m.dead_at}"
            elif m.silences:
                out[cloud_id] = f"silent-until:{m.silent_until}"
        return out

    def _vanish_agent(self, machine: Machine) -> None:
        if machine.executor is not None:
            machine.executor.kill_all("agent-killed")
        machine.agent = None


def _state(instance: dict[str, Any]) -> str:
    return str(instance["State"]["Name"])
