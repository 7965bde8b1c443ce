"""One machine of the soak: a moto instance Corral launched, and the REAL agent
(``agent_runtime.agent.Agent``) on it, stepped with ``run_once`` on the soak's clock.

The agent is assembled as ``corral-agent`` assembles it (``build_agent``), with these parts
swapped for the soak's: identity and interruption notices come from the machine
(``MachineSource``, as the dev metadata source does in the local stack), trials run on a
``SimExecutor``, sleeping is free, and its HTTP session is a ``Transport`` that hands each
request to the real ``api`` Lambda handler as an API Gateway HTTP API v2 event (the client,
its authentication, retries and backoff are the real ones). It authenticates with the dev
token the local stack's instance emulator would mint for the instance.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from agent_runtime.agent import Agent
from agent_runtime.client import BearerAuth, ControlPlaneClient
from agent_runtime.config import AgentConfig
from agent_runtime.identity import InstanceIdentity, Notice
from agent_runtime.trials import TrialRun
from corral.adapters.memory import FakeClock
from corral.api.auth import mint_agent_token
from corral.protocol.agent import GpuInfo, Identity, IdentityKind
from tests.chaos.aws import AGENT_SECRET, POOL
from tests.chaos.lambdas import Gateway, Unreachable
from tests.chaos.trials import Ledger, SimExecutor

API_URL = "https://api.corral.test"


class SyncTrialRun(TrialRun):
    """Launches in the calling thread: the simulated executor returns at once, and a thread
    would make the soak's outcome depend on the OS scheduler."""

    def start(self) -> None:
        self._launch()


class AgentClock:
    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    def monotonic(self) -> float:
        return self._clock.now()

    def time(self) -> float:
        return self._clock.now()


class FreeSleeper:
    def sleep(self, seconds: float) -> None:
        pass

    def wake(self) -> None:
        pass


class _Response:
    def __init__(self, status: int, body: Any) -> None:
        self.status_code = status
        self.content = b"" if body is None else json.dumps(body).encode()
        self.text = self.content.decode()

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass
class Machine:
    cloud_id: str
    instance_type: str
    spot: bool
    record_id: str | None
    private_ip: str
    gpus: int
    zone: str
    boot_at: float
    never_registers: bool = False
    agent: Agent | None = None
    executor: SimExecutor | None = None
    dead: bool = False  # the agent is gone for good; the instance runs on
    dead_at: float | None = None
    gone: bool = False  # the instance is gone
    notice: Notice | None = None
    silent_until: float = 0.0
    silences: int = 0
    generation: int = 0
    exits: list[int] = field(default_factory=list)

    @property
    def token(self) -> str:
        return mint_agent_token(AGENT_SECRET.encode(), self.cloud_id)


class MachineSource:
    def __init__(self, machine: Machine) -> None:
        self.machine = machine

    def identity(self) -> InstanceIdentity:
        m = self.machine
        return InstanceIdentity(
            cloud_id=m.cloud_id,
            identity=Identity(kind=IdentityKind.DEV, document=m.token),
            instance_type=m.instance_type,
            zone=m.zone,
            capacity_type="spot" if m.spot else "on-demand",
            private_ip=m.private_ip,
            region="us-east-1",
        )

    def notice(self) -> Notice | None:
        return self.machine.notice

    def identity_token(self, audience: str) -> str:
        raise RuntimeError("dev agents use the dev token")


class Transport:
    """``requests.Session.post`` for the agent's client, through the Gateway."""

    def __init__(
        self, machine: Machine, gateway: Gateway, clock: FakeClock, drops: Callable[[], str]
    ) -> None:
        self.machine, self.gateway, self.clock, self.drops = machine, gateway, clock, drops
        self.dropped = 0

    def post(self, url: str, data: bytes, headers: dict[str, str], timeout: float) -> _Response:
        path = url.removeprefix(API_URL)
        beat = path.endswith("/heartbeat")
        drop = self.drops() if beat else ""
        if beat and self.clock.now() < self.machine.silent_until:
            drop = "request"
        if drop == "request":
            self.dropped += 1
            raise requests.ConnectionError(f"heartbeat of {self.machine.cloud_id} lost")
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        try:
            status, body = self.gateway.request(
                "POST", path, data, token, source_ip=self.machine.private_ip
            )
        except Unreachable as exc:
            raise requests.ConnectionError(str(exc)) from None
        if drop == "reply":
            self.dropped += 1
            raise requests.ConnectionError(f"heartbeat reply to {self.machine.cloud_id} lost")
        return _Response(status, body)


def start_agent(
    machine: Machine,
    *,
    gateway: Gateway,
    clock: FakeClock,
    ledger: Ledger,
    rng: random.Random,
    work_root: Path,
    drops: Callable[[], str],
    shutdown: Callable[[list[str]], int],
) -> Agent:
    """A fresh agent process on ``machine`` (first boot, or systemd restarting it)."""
    machine.generation += 1
    config = AgentConfig.model_validate(
        {
            "api_url": API_URL,
            "auth": "dev",
            "cloud": "dev",
            "dev_token": machine.token,
            "dev_instance_id": machine.cloud_id,
            "dev_instance_type": machine.instance_type,
            "dev_zone": machine.zone,
            "dev_capacity_type": "spot" if machine.spot else "on-demand",
            "pool": POOL,
            "record_id": machine.record_id,
            "fake_gpus": machine.gpus,
            "expected_gpus": machine.gpus,
            "executor": "process",
            "work_dir": str(work_root / machine.cloud_id),
        }
    )
    sleeper = FreeSleeper()
    client = ControlPlaneClient(
        API_URL,
        BearerAuth(lambda: machine.token, AgentClock(clock)),
        sleeper,
        timeout_s=config.request_timeout_s,
        attempts=config.agent_reconnect_attempts,
        backoff_s=config.agent_reconnect_backoff,
        max_backoff_s=config.max_backoff_s,
        rng=random.Random(rng.random()),
    )
    # The one seam: the client's HTTP session is the in-process gateway.
    client._http = Transport(machine, gateway, clock, drops)  # type: ignore[assignment]
    if machine.executor is None:  # one per machine: trials may outlive an agent process
        machine.executor = SimExecutor(machine.cloud_id, clock, ledger, random.Random(rng.random()))
    gpus = [
        GpuInfo(index=i, uuid=f"GPU-{machine.cloud_id}-{i}", name="A10G", memory_mib=24_576)
        for i in range(machine.gpus)
    ]
    identity = MachineSource(machine).identity()
    machine.agent = Agent(
        config,
        identity,
        gpus,
        client,
        machine.executor,
        MachineSource(machine),
        AgentClock(clock),
        sleeper,
        shutdown_runner=shutdown,
        metrics=lambda: [],
    )
    return machine.agent
