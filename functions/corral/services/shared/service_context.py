"""What every service needs: the ports, the pools, and the settings. Built once per container
by the composition module of each runtime (Lambda, Cloud Functions, local stack, simulator)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from corral.domain import planner, reaper
from corral.domain.instance import Instance
from corral.domain.planner import PoolPlan
from corral.domain.policy import PoolPolicy
from corral.domain.reaper import ReapPlan
from corral.domain.reconcile_decisions import ReconcileSettings
from corral.domain.records import Heartbeat, PoolState
from corral.domain.trial import Trial
from corral.domain.trial_deadlines import TrialDeadlines
from corral.ports.clock import Clock
from corral.ports.cloud import CloudProvider
from corral.ports.queue import Queue
from corral.ports.store import Store


class IdSource(Protocol):
    def new(self, prefix: str) -> str: ...


class RandomIds:
    """Short random ids: unique enough for records, short enough for EC2 ClientToken (64)."""

    def new(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:16]}"


class ScalingPolicy(Protocol):
    """How pools scale: the planner (what to launch) and the reaper (what to let go).

    Production always uses :class:`DomainPolicy`; the simulator swaps in other policies
    (a model of Determined's provisioner) to compare them through the same services."""

    def plan_pool(
        self,
        pool: PoolPolicy,
        unplaced: Sequence[Trial],
        instances: Sequence[Instance],
        state: PoolState,
        now: float,
        *,
        leftover_free: Mapping[str, tuple[int, ...]] | None = None,
        month_to_date_usd: float = 0.0,
    ) -> PoolPlan: ...

    def plan_reaping(
        self,
        pool: PoolPolicy,
        instances: Sequence[Instance],
        now: float,
        *,
        reserved: frozenset[str] = frozenset(),
        heartbeats: Mapping[str, Heartbeat] | None = None,
        room_needed: int = 0,
        fresh_after: float | None = None,
        month_to_date_usd: float | None = None,
    ) -> ReapPlan: ...


class DomainPolicy:
    """Corral's own policy: the domain planner and reaper, unchanged."""

    plan_pool = staticmethod(planner.plan_pool)
    plan_reaping = staticmethod(reaper.plan_reaping)


@dataclass
class SequentialIds:
    """Deterministic ids for tests and the simulator."""

    counter: int = 0

    def new(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter:06d}"


# The agent's default SIGTERM-to-SIGKILL grace (``AgentConfig.stop_grace_s``): a fenced
# trial is gone this long after its agent starts stopping it.
AGENT_STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class ServiceSettings:
    """Fixed timings and limits of the control plane, not configuration: every runtime
    builds the Context with these defaults, and nothing reads them from the cluster config
    or the environment (docs/configuration.md, "Fixed timings", lists them). A dataclass so
    that tests read the values they wait out instead of repeating the numbers."""

    reconcile: ReconcileSettings = field(default_factory=ReconcileSettings)
    # A QUEUED record whose launch message was sent longer ago than this gets it again
    # (the send may have been lost with the function that wrote the record).
    redrive_after_s: float = 120.0
    heartbeat_interval_s: float = 5.0
    # How long a trial may sit ASSIGNED or STOPPING with no agent moving it on.
    trial_deadlines: TrialDeadlines = field(default_factory=TrialDeadlines)
    dead_man_switch_s: float = 600.0

    @property
    def fence_after_s(self) -> float:
        """How long an agent out of contact keeps its trials running (50 s by default). An
        agent silent for ``heartbeat_timeout_s`` is declared LOST and its trials run
        elsewhere at once; the agent, timing its silence from its last answered heartbeat's
        request (never later than the control plane's record of it), stops them early enough
        that they are gone by then, a partitioned agent included:

            heartbeat_timeout_s = fence_after_s + AGENT_STOP_GRACE_S + 2 heartbeat intervals

        The two intervals cover the agent's loop (it checks once a tick) and the SIGKILL's
        own tick. docs/reliability.md, "Agent death to requeue", has the whole budget."""
        margin = 2 * self.heartbeat_interval_s
        return max(self.reconcile.heartbeat_timeout_s - AGENT_STOP_GRACE_S - margin, margin)

    # Where checkpoints go when the experiment names no checkpoint_storage.
    default_checkpoint_uri: str = "file:///tmp/corral-checkpoints"
    # Commit size limit (DynamoDB TransactWriteItems takes at most 100 items).
    max_commit: int = 100


@dataclass
class Context:
    store: Store
    cloud: CloudProvider
    queue: Queue
    clock: Clock
    pools: Mapping[str, PoolPolicy]
    default_pool: str
    ids: IdSource = field(default_factory=RandomIds)
    rng: random.Random = field(default_factory=random.Random)
    settings: ServiceSettings = field(default_factory=ServiceSettings)
    policy: ScalingPolicy = field(default_factory=DomainPolicy)
    # The cluster config's ``admins`` (``corral.domain.access``): who may change anyone's
    # work. Empty by default: a runtime that passes none has no admins, and owners alone may
    # change their work.
    admins: tuple[str, ...] = ()
    # The deployment's trial role (AWS; the template's TrialRole): told to agents at
    # registration, so each trial gets credentials of its own (docs/security.md).
    trial_role_arn: str | None = None

    def pool(self, name: str) -> PoolPolicy | None:
        return self.pools.get(name)
