"""A whole Corral on memory adapters, driven tick by tick with a fake clock.

``FakeAgent`` plays the agent runtime through the same service calls the API makes; trial
behaviour is scripted per trial (how long it runs, its exit code). Used by the service tests;
the functional tests repeat the important cases through the real handlers against moto.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from corral.adapters.memory import (
    FakeClock,
    InMemoryQueue,
    InMemoryStore,
    SimulatedCloud,
    SimulatedCloudConfig,
)
from corral.domain.config import ExperimentConfig
from corral.domain.errors import ConflictError, Refused
from corral.domain.instance import Instance
from corral.domain.offerings import CapacityType, Offering
from corral.domain.policy import StaticPool
from corral.ports.cloud import CloudState
from corral.ports.queue import QueueName
from corral.protocol.agent import (
    AgentTrialState,
    GpuInfo,
    HeartbeatRequest,
    Identity,
    IdentityKind,
    RegisterRequest,
    TrialAssignment,
    TrialStatus,
)
from corral.services import agents as agent_service
from corral.services.dispatch import dispatch
from corral.services.schedule_pass import run_schedule_pass
from corral.services.shared.service_context import Context, SequentialIds
from corral.services.submit import Submitted, submit_experiment

SPOT_1 = Offering("g.1", "zone-a", CapacityType.SPOT, 1, 0.4)
OD_1 = Offering("g.1", "zone-a", CapacityType.ON_DEMAND, 1, 1.0)
SPOT_4 = Offering("g.4", "zone-a", CapacityType.SPOT, 4, 1.5)


def make_pool(*offerings: Offering, **settings: object) -> StaticPool:
    return StaticPool(  # type: ignore[arg-type]
        name=str(settings.pop("name", "gpu")),
        offering_list=offerings or (SPOT_1, OD_1),
        **settings,
    )


@dataclass
class Script:
    """How a trial behaves on an agent: runs ``duration_s`` then exits with ``exit_code``."""

    duration_s: float = 60.0
    exit_code: int = 0


@dataclass
class RunningTrial:
    assignment: TrialAssignment
    started_at: float
    state: AgentTrialState = AgentTrialState.RUNNING
    exit_code: int | None = None


@dataclass
class FakeAgent:
    cluster: Cluster
    cloud_id: str
    gpus: int
    agent_id: str | None = None
    running: dict[str, RunningTrial] = field(default_factory=dict)
    finished: list[TrialStatus] = field(default_factory=list)
    alive: bool = True
    interruption_notice: bool = False
    starts: list[TrialAssignment] = field(default_factory=list)
    # False plays an agent that never starts what it is sent (an old agent stuck draining).
    takes_work: bool = True
    # False plays an agent that never stops what it is told to stop.
    obeys_stops: bool = True

    def register(self) -> None:
        record_id = self.cluster.cloud.tags(self.cloud_id).get("corral-record")
        cloud = self.cluster.cloud.get(self.cloud_id)
        assert cloud is not None
        request = RegisterRequest(
            cloud_id=self.cloud_id,
            record_id=record_id,
            identity=Identity(kind=IdentityKind.DEV, document="dev"),
            instance_type=cloud.instance_type,
            zone=cloud.location,
            private_ip=cloud.private_ip,
            gpus=[
                GpuInfo(index=i, uuid=f"GPU-{i}", name="fake", memory_mib=1024)
                for i in range(self.gpus)
            ],
        )
        self.agent_id = agent_service.register(self.cluster.ctx, request, self.cloud_id).agent_id

    def heartbeat(self) -> None:
        assert self.agent_id is not None
        now = self.cluster.clock.now()
        for trial_id, run in list(self.running.items()):
            script = self.cluster.scripts.get(trial_id, self.cluster.default_script)
            if now - run.started_at >= script.duration_s:
                self.finished.append(
                    TrialStatus(
                        trial_id=trial_id, state=AgentTrialState.EXITED, exit_code=script.exit_code
                    )
                )
                del self.running[trial_id]
        statuses = [TrialStatus(trial_id=t, state=r.state) for t, r in self.running.items()]
        statuses += self.finished
        reply = agent_service.heartbeat(
            self.cluster.ctx,
            self.agent_id,
            self.cloud_id,
            HeartbeatRequest(trials=statuses, interruption_notice=self.interruption_notice),
        )
        self.finished = []
        for trial_id in reply.stop if self.obeys_stops else ():
            self.running.pop(trial_id, None)
            self.finished.append(TrialStatus(trial_id=trial_id, state=AgentTrialState.STOPPED))
        for assignment in reply.start:
            self.starts.append(assignment)
            if not self.takes_work:
                continue
            self.running[assignment.trial_id] = RunningTrial(assignment, now)


class Cluster:
    def __init__(
        self,
        *pools: StaticPool,
        cloud: SimulatedCloudConfig | None = None,
        gpus_found: Callable[[int], int] = lambda slots: slots,
    ) -> None:
        pools = pools or (make_pool(),)
        self.clock = FakeClock()
        self.store = InMemoryStore()
        self.queue = InMemoryQueue(self.clock, redrive_after=5)
        self.cloud = SimulatedCloud(self.clock, cloud or SimulatedCloudConfig(boot_s_mean=30.0))
        self.ctx = Context(
            store=self.store,
            cloud=self.cloud,
            queue=self.queue,
            clock=self.clock,
            pools={p.name: p for p in pools},
            default_pool=pools[0].name,
            ids=SequentialIds(),
            rng=random.Random(7),
        )
        self.agents: dict[str, FakeAgent] = {}
        self.scripts: dict[str, Script] = {}
        self.default_script = Script()
        self.gpus_found = gpus_found
        self.handled: list[str] = []
        # The one-minute EventBridge timer of the schedule function (the safety net).
        self.schedule_every_s = 60.0
        self._next_timer = self.clock.now() + self.schedule_every_s

    # ---- driving ---------------------------------------------------------------------
    def booted_instance_request(self, **fields: object) -> RegisterRequest:
        """Submit one experiment, let its one instance boot, and the request its agent
        would register with (``fields`` over a healthy default; no agent is started)."""
        self.submit()
        self.pump()
        self.clock.advance(31)
        (cloud,) = self.cloud.list_owned()
        base: dict[str, object] = {
            "cloud_id": cloud.cloud_id,
            "identity": Identity(kind=IdentityKind.DEV, document="dev"),
            "instance_type": cloud.instance_type,
            "zone": cloud.location,
            "gpus": [GpuInfo(index=0, uuid="GPU-0", name="fake", memory_mib=1024)],
        }
        return RegisterRequest.model_validate({**base, **fields})

    def submit(self, **config: object) -> Submitted:
        body = {"entrypoint": "python train.py", **config}
        return submit_experiment(self.ctx, ExperimentConfig.model_validate(body))

    def submit_scripted(self, script: Script, **config: object) -> str:
        """Submit an experiment whose (first) trial runs as ``script``; that trial's id."""
        trial_id = self.submit(**config).trials[0].id
        self.scripts[trial_id] = script
        return trial_id

    def pump(self, limit: int = 200) -> None:
        """Deliver queued messages to the services until the queues are quiet."""
        for _ in range(limit):
            batch = [
                (q, r)
                for q in (QueueName.SCHEDULE, QueueName.SCALE_UP)
                for r in self.queue.receive(q, 10, visibility_timeout_s=60)
            ]
            if not batch:
                return
            for queue, received in batch:
                self.handled.append(dispatch(self.ctx, received.message))
                self.queue.delete(queue, received.receipt)
        raise AssertionError("queues never went quiet")

    def step(self, seconds: float = 5.0) -> None:
        """Time passes: instances boot and register, agents heartbeat, messages flow."""
        self.clock.advance(seconds)
        for ci in self.cloud.list_owned():
            if ci.state is CloudState.RUNNING and ci.cloud_id not in self.agents:
                record = self.store.instance_by_cloud_id(ci.cloud_id)
                slots = record.slots if record else 0
                agent = FakeAgent(self, ci.cloud_id, self.gpus_found(slots))
                self.agents[ci.cloud_id] = agent
                try:
                    agent.register()
                except (Refused, ConflictError):
                    agent.alive = False
        for cloud_id, agent in self.agents.items():
            cloud = self.cloud.get(cloud_id)
            if agent.alive and agent.agent_id and cloud and cloud.state is CloudState.RUNNING:
                agent.heartbeat()
        if self.clock.now() >= self._next_timer:
            self._next_timer += self.schedule_every_s
            run_schedule_pass(self.ctx)
        self.pump()

    def run(self, seconds: float, step: float = 5.0) -> None:
        for _ in range(int(seconds // step)):
            self.step(step)

    # ---- looking -----------------------------------------------------------------------
    def instances(self) -> list[Instance]:
        return self.store.instances()

    def trial(self, trial_id: str):  # type: ignore[no-untyped-def]
        trial = self.store.get_trial(trial_id)
        assert trial is not None
        return trial

    def running_cloud_ids(self) -> list[str]:
        return [c.cloud_id for c in self.cloud.list_owned() if not c.state.is_gone]


def running_cluster(
    *offerings: Offering, slots: int = 1, run_s: float = 40.0, **pool_settings: object
) -> tuple[Cluster, str]:
    """A cluster running one long trial of ``slots`` GPUs (a gang when it needs several
    agents): submitted, launched, registered and RUNNING."""
    cluster = Cluster(make_pool(*offerings, **pool_settings))
    trial_id = cluster.submit_scripted(
        Script(duration_s=10_000), resources={"slots_per_trial": slots}
    )
    cluster.pump()
    cluster.run(run_s)
    assert cluster.trial(trial_id).state.value == "RUNNING"
    return cluster, trial_id
