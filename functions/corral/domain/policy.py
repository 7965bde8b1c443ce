"""What the domain needs to know about a pool, as a Protocol.

The pydantic ``ResourcePool`` of the cluster config satisfies it structurally; tests and the
simulator can use ``StaticPool``. The domain never branches on the cloud: everything cloud
specific stays in the config and the providers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from corral.domain.images import DEFAULT_IMAGE_CPU, DEFAULT_IMAGE_GPU
from corral.domain.offerings import Offering


class PoolPolicy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def min_instances(self) -> int: ...

    @property
    def max_instances(self) -> int: ...

    @property
    def max_idle_s(self) -> float:
        """max_idle_agent_period: the longest an idle agent may live."""
        ...

    @property
    def starting_deadline_s(self) -> float:
        """max_agent_starting_period: launch to registration."""
        ...

    @property
    def launch_error_retries(self) -> int: ...

    @property
    def capacity_memory_s(self) -> float:
        """How long an offering the cloud refused is skipped."""
        ...

    @property
    def monthly_budget_usd(self) -> float | None: ...

    @property
    def on_demand_fallback(self) -> bool: ...

    @property
    def on_demand_fallback_after_s(self) -> float | None:
        """How long a trial waits for spot before on-demand is bought for it (None: never,
        also when ``on_demand_fallback`` is off); see ``corral.domain.fallback``."""
        ...

    @property
    def reap_fallback_early(self) -> bool:
        """Drain idle on-demand fallback agents of a spot pool once idle as long as their
        boot took (never later than max_idle_s)."""
        ...

    @property
    def consolidate(self) -> bool:
        """Move checkpointed trials off under-used agents so they can be terminated
        (``corral.domain.consolidation``)."""
        ...

    @property
    def move_fallback_to_spot(self) -> bool:
        """Move the checkpointed trials of on-demand fallback agents to spot once spot is
        back (``corral.domain.consolidation``), also when the pool does not consolidate."""
        ...

    @property
    def warm_pool_size(self) -> int:
        """Idle agents kept stopped (disks kept) to start again instead of launching."""
        ...

    @property
    def max_stopped_s(self) -> float:
        """How long a stopped instance is kept before it is terminated."""
        ...

    @property
    def disk_hourly_usd(self) -> float:
        """What one instance's disks cost an hour, from its launch until it is terminated
        (stopped in the warm pool, they are all it costs)."""
        ...

    def offerings(self) -> list[Offering]:
        """Every offering the pool may launch (spot ones first when the pool uses spot)."""
        ...

    @property
    def gpu_slots(self) -> bool:
        """Its slots are GPUs (False: a pool of zero-GPU types whose slots are CPUs)."""
        ...

    def default_image(self, gpus: bool) -> str:
        """The image of a trial (with GPUs or not) whose config names none: the pool's
        ``task_container_defaults.image``, else Corral's default."""
        ...


@dataclass(frozen=True)
class StaticPool:
    """A plain PoolPolicy for tests and the simulator."""

    name: str
    offering_list: tuple[Offering, ...]
    min_instances: int = 0
    max_instances: int = 5
    max_idle_s: float = 300.0
    starting_deadline_s: float = 1200.0
    launch_error_retries: int = 3
    capacity_memory_s: float = 180.0
    monthly_budget_usd: float | None = None
    on_demand_fallback: bool = True
    reap_fallback_early: bool = True
    # 0: fall back at once (what tests of other rules assume); the config's default is
    # ``fallback.ON_DEMAND_FALLBACK_AFTER_S``. Not consulted when on_demand_fallback is off.
    fallback_after_s: float | None = 0.0
    consolidate: bool = False
    move_fallback_to_spot: bool = True
    warm_pool_size: int = 0
    max_stopped_s: float = 72 * 3600.0
    disk_hourly_usd: float = 0.0
    gpu_slots: bool = True

    @property
    def on_demand_fallback_after_s(self) -> float | None:
        return self.fallback_after_s if self.on_demand_fallback else None

    def offerings(self) -> list[Offering]:
        return list(self.offering_list)

    def default_image(self, gpus: bool) -> str:
        return DEFAULT_IMAGE_GPU if gpus else DEFAULT_IMAGE_CPU
