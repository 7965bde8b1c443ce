"""What every cloud provider block has: agent settings, pool limits, timers and money.

Determined keeps these inside the provider block of a resource pool, so we do too; that way a
Determined ``master.yaml`` needs no restructuring. Cloud blocks (`aws.py`, `gcp.py`) extend
:class:`CommonProvider` and implement the few methods the pool needs to list its offerings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from corral.domain.config.durations import Duration, PositiveDuration
from corral.domain.config.errors import field_error, rule_error
from corral.domain.offerings import CapacityType, Offering


class FrozenModel(BaseModel):
    """Base of every config model: immutable, and unknown keys are errors (typos get caught)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True, slots=True)
class Ownership:
    """The tag (AWS) or label (GCP) pair that marks instances Corral may manage."""

    key: str
    value: str


def _one_or_many(value: object) -> object:
    """Accept a single item where a list is expected (``zone: us-central1-a``)."""
    if value is None:
        return ()
    if isinstance(value, str | dict):
        return (value,)
    return value


OneOrMany = BeforeValidator(_one_or_many)


def non_empty_str(value: object) -> object:
    if isinstance(value, str) and not value.strip():
        raise field_error("must not be empty")
    return value


NonEmptyStr = Annotated[str, BeforeValidator(non_empty_str)]
StrList = Annotated[tuple[NonEmptyStr, ...], OneOrMany]


def unique(value: tuple[Any, ...]) -> tuple[Any, ...]:
    """An after-validator for lists whose items must not repeat."""
    seen: list[Any] = []
    for item in value:
        if item in seen:
            raise field_error(f"{item!r} is listed twice")
        seen.append(item)
    return value


class CommonProvider(FrozenModel):
    """Fields shared by the AWS and GCP provider blocks (Determined's names and defaults)."""

    # --- the agent on each instance
    master_url: str | None = None
    startup_script: str | None = None
    container_startup_script: str | None = None
    agent_docker_network: str = "corral"
    agent_docker_image: str | None = None
    agent_docker_runtime: str = "runc"
    agent_reconnect_attempts: int = Field(default=5, ge=0)
    agent_reconnect_backoff: Duration = 5.0
    # --- pool size and timers
    max_idle_agent_period: Duration = 1200.0
    max_agent_starting_period: PositiveDuration = 1200.0
    min_instances: int = Field(default=0, ge=0)
    max_instances: int = Field(default=5, ge=0)
    launch_error_timeout: Duration = 0.0
    launch_error_retries: int = Field(default=3, ge=0)
    # --- Corral additions
    on_demand_fallback: bool = True
    monthly_budget_usd: float | None = Field(default=None, gt=0)
    capacity_memory_period: Duration = 180.0
    # An idle on-demand agent of a spot pool (fallback capacity, ~3x the spot price) is
    # drained once idle as long as it took to boot, not after max_idle_agent_period.
    reap_fallback_early: bool = True

    @model_validator(mode="after")
    def _check_common(self) -> Self:
        if self.max_instances < self.min_instances:
            raise rule_error("max_instances", "must be >= min_instances")
        if self.master_url is not None and not self.master_url.startswith(("http://", "https://")):
            raise rule_error("master_url", "must start with http:// or https://")
        return self

    # --- what a cloud block provides to the pool
    @property
    def cloud(self) -> str:
        raise NotImplementedError

    @property
    def ownership(self) -> Ownership:
        raise NotImplementedError

    @property
    def is_spot(self) -> bool:
        """True when the pool launches spot (GCP: Spot/preemptible) capacity at all."""
        raise NotImplementedError

    def offerings(self) -> list[Offering]:
        raise NotImplementedError

    def capacity_types(self, spot: bool) -> tuple[CapacityType, ...]:
        """Capacity types to offer, best first: spot, then on-demand if allowed to fall back."""
        if not spot:
            return (CapacityType.ON_DEMAND,)
        if self.on_demand_fallback:
            return (CapacityType.SPOT, CapacityType.ON_DEMAND)
        return (CapacityType.SPOT,)
