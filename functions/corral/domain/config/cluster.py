"""The cluster config: resource pools, each with one cloud provider block.

Domain code reads pool settings through :class:`ResourcePool`'s properties so it never branches
on the cloud; cloud-specific settings stay on ``pool.provider`` for the adapters.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Annotated, Any, Literal, cast

from pydantic import AfterValidator, AliasChoices, Field, model_validator

from corral.domain.config.aws import AwsProvider
from corral.domain.config.common import (
    FrozenModel,
    NonEmptyStr,
    OneOrMany,
    Ownership,
    Partial,
    RuleProblems,
    Unavailable,
    rule,
    unique,
)
from corral.domain.config.errors import field_error, matching, rule_error
from corral.domain.config.gcp import LABEL_RULE, GcpProvider
from corral.domain.config.task_defaults import TaskContainerDefaults
from corral.domain.offerings import Offering

# Pool names end up in a tag (AWS) or label (GCP) on every instance, and in record keys.
_POOL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_CHECK_POOL_NAME = matching(
    _POOL_NAME,
    "must be 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit",
    echo=False,
)
_GCP_POOL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")

Provider = Annotated[AwsProvider | GcpProvider, Field(discriminator="type")]


class ResourcePool(FrozenModel):
    name: Annotated[str, _CHECK_POOL_NAME] = Field(
        validation_alias=AliasChoices("name", "pool_name")
    )
    """The pool's name, written in a tag (AWS) or label (GCP) on every instance of the pool: 1-63
    letters, digits, `_`, `.` or `-`, starting with a letter or digit; for GCP pools a GCP label
    value (lowercase). Unique in the cluster."""
    description: str = ""
    """Shown in listings."""
    provider: Provider
    """The cloud block: the fields common to both clouds plus the cloud's own (tables below)."""
    # Determined's per-pool block: over the cluster's, key by key (task_defaults.py).
    task_container_defaults: TaskContainerDefaults = TaskContainerDefaults()
    """This pool's GLOO and NCCL port ranges, default image and registry credentials, over the
    cluster's `task_container_defaults` key by key."""

    @model_validator(mode="after")
    def _task_defaults_to_provider(self) -> ResourcePool:
        return self.with_task_defaults(TaskContainerDefaults())

    def with_task_defaults(self, cluster: TaskContainerDefaults) -> ResourcePool:
        """This pool with its provider carrying its block over ``cluster``'s: the adapters
        render the agent bootstrap from the provider block alone."""
        effective = self.task_container_defaults.over(cluster)
        if effective == self.provider.task_defaults:
            return self
        return self.model_copy(update={"provider": self.provider.with_task_defaults(effective)})

    @rule
    def _gcp_name(self) -> RuleProblems:
        # Only the provider's type matters here, so a provider with other problems still counts.
        if _provider_type(self) == "gcp" and not _GCP_POOL_NAME.match(self.name):
            yield rule_error(
                "name", f"must be a valid GCP label value ({LABEL_RULE}): it labels instances"
            )

    # --- cloud-neutral view for the domain
    @property
    def cloud(self) -> Literal["aws", "gcp"]:
        return self.provider.type

    @property
    def min_instances(self) -> int:
        return self.provider.min_instances

    @property
    def max_instances(self) -> int:
        return self.provider.max_instances

    @property
    def max_idle_s(self) -> float:
        return self.provider.max_idle_agent_period

    @property
    def starting_deadline_s(self) -> float:
        return self.provider.max_agent_starting_period

    @property
    def launch_error_retries(self) -> int:
        return self.provider.launch_error_retries

    @property
    def on_demand_fallback(self) -> bool:
        return self.provider.on_demand_fallback

    @property
    def on_demand_fallback_after_s(self) -> float | None:
        return self.provider.on_demand_fallback_after_s

    @property
    def monthly_budget_usd(self) -> float | None:
        return self.provider.monthly_budget_usd

    @property
    def capacity_memory_s(self) -> float:
        return self.provider.capacity_memory_period

    @property
    def ownership(self) -> Ownership:
        return self.provider.ownership

    @property
    def is_spot(self) -> bool:
        return self.provider.is_spot

    @property
    def locations(self) -> tuple[str, ...]:
        return self.provider.locations

    def offerings(self) -> list[Offering]:
        """Every (instance type x location x capacity type) this pool may launch.

        Spot offerings come first, then on-demand ones (when the pool is not spot, or may fall
        back); within each, instance types and then locations keep the config's order.
        ``slots`` and ``hourly_price`` come from the catalog (price 0.0 when unknown).
        Computed once per pool (the planner asks on every pass); callers get a fresh list.
        """
        return list(self._offerings)

    @cached_property
    def _offerings(self) -> tuple[Offering, ...]:
        return tuple(self.provider.offerings())

    @property
    def reap_fallback_early(self) -> bool:
        return self.provider.reap_fallback_early

    @property
    def consolidate(self) -> bool:
        return self.provider.consolidate

    @property
    def move_fallback_to_spot(self) -> bool:
        return self.provider.move_fallback_to_spot

    @property
    def warm_pool_size(self) -> int:
        return self.provider.warm_pool.size

    @property
    def max_stopped_s(self) -> float:
        return self.provider.warm_pool.max_stopped_period

    @property
    def disk_hourly_usd(self) -> float:
        """What one instance's boot disk costs an hour: billed from its launch until it is
        terminated, stopped in a warm pool or not."""
        return self.provider.disk_hourly_usd

    def default_image(self, gpus: bool) -> str:
        return self.provider.task_defaults.default_image(gpus)

    @property
    def gpu_slots(self) -> bool:
        """Some instance type of the pool has GPUs (else its slots are CPU slots)."""
        return self._gpu_slots

    @cached_property
    def _gpu_slots(self) -> bool:
        return self.provider.has_gpus

    @property
    def max_slots_per_instance(self) -> int:
        return max((o.slots for o in self.offerings()), default=0)


def _provider_type(pool: ResourcePool) -> object:
    """The pool's cloud: from its provider, or from the input when the provider has problems."""
    subject: object = pool
    if isinstance(subject, Partial):
        provider = subject.raw("provider")
        return provider.get("type") if isinstance(provider, Mapping) else None
    return pool.provider.type


def _raw_pools(config: ClusterConfig) -> list[object] | None:
    """The input's pool list when some pool has problems (None when all are valid)."""
    subject: object = config
    if isinstance(subject, Partial) and subject.failed_at("resource_pools"):
        pools = subject.raw("resource_pools")
        if not isinstance(pools, list):
            raise Unavailable("resource_pools")
        return pools
    return None


def _valid_pool_names(config: ClusterConfig) -> Iterator[tuple[int, str]]:
    """(index, name) of every pool whose name is valid, even when the pool has problems."""
    pools = _raw_pools(config)
    if pools is None:
        yield from ((i, pool.name) for i, pool in enumerate(config.resource_pools))
        return
    subject = cast(Partial, config)
    for i, pool in enumerate(pools):
        if not isinstance(pool, Mapping) or any(
            subject.failed_at("resource_pools", i, key) for key in ("name", "pool_name")
        ):
            continue
        name = pool.get("name", pool.get("pool_name"))
        if isinstance(name, str) and _POOL_NAME.match(name):
            yield i, name


def _principal_pattern(value: str) -> str:
    # A principal name never has surrounding blanks: such a pattern could match no one.
    if value != value.strip():
        raise field_error(f"{value!r} has leading or trailing blanks")
    return value


# Principal names or fnmatch patterns (``corral.domain.access``): IAM ARNs, Google emails,
# local-stack user names.
AdminList = Annotated[
    tuple[Annotated[NonEmptyStr, AfterValidator(_principal_pattern)], ...],
    OneOrMany,
    AfterValidator(unique),
]


class ClusterConfig(FrozenModel):
    resource_pools: tuple[ResourcePool, ...] = Field(min_length=1)
    """The pools Corral launches instances for; names must be unique."""
    default_resource_pool: str | None = None
    """Pool of jobs that name none; must name a pool. None: the first pool."""
    # Who may change anyone's work (kill another user's experiment, reset a pool's breaker).
    admins: AdminList = ()
    """Principals who may change anyone's work (kill another user's experiment or command, or one
    stored before owners were recorded; reset a pool's breaker): exact names or case-sensitive
    `fnmatch` patterns of the names the API gives callers: IAM ARNs on AWS (a role session also
    matches its role, `arn:aws:iam::<acct>:role/<role>`), lowercase Google emails on GCP, the
    token's user on the local stack. `CORRAL_ADMINS` (comma-separated) adds more; the local stack
    adds its default user `local`. Everyone else changes only their own work (docs/security.md)."""
    # Determined's cluster-wide block: GLOO/NCCL port ranges for every pool (task_defaults.py).
    task_container_defaults: TaskContainerDefaults = TaskContainerDefaults()
    """Determined's cluster-wide block, for every pool: Corral reads its GLOO and NCCL port ranges,
    its default `image` and its `registry_auth`. Determined's other keys are ignored with a
    warning."""
    # Modelled by the simulator's owner; carried through untouched until then.
    simulation: dict[str, Any] | None = None
    """The cloud model of `corral sim` (boot times, spot interruptions, capacity outages,
    checkpoints; docs/simulator.md); ignored by a deployed cluster. Problems are named
    `simulation.<field>`."""

    @model_validator(mode="after")
    def _task_defaults_to_pools(self) -> ClusterConfig:
        pools = tuple(
            p.with_task_defaults(self.task_container_defaults) for p in self.resource_pools
        )
        if all(new is old for new, old in zip(pools, self.resource_pools, strict=True)):
            return self
        return self.model_copy(update={"resource_pools": pools})

    @rule
    def _unique_names(self) -> RuleProblems:
        first_index: dict[str, int] = {}
        for i, name in _valid_pool_names(self):
            if name in first_index:
                yield rule_error(
                    f"resource_pools[{i}].name",
                    f"duplicate pool name {name!r} (also resource_pools[{first_index[name]}])",
                )
            else:
                first_index[name] = i

    @rule
    def _default_pool_exists(self) -> RuleProblems:
        default = self.default_resource_pool
        if default is None:
            return
        pools = _raw_pools(self)
        valid = list(_valid_pool_names(self))
        if not valid or (pools is not None and len(valid) < len(pools)):
            return  # a pool whose name is wrong may be the one meant
        names = dict.fromkeys(name for _, name in valid)
        if default in names:
            return
        yield rule_error(
            "default_resource_pool", f"no pool named {default!r} (pools: {', '.join(names)})"
        )

    @property
    def pool_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.resource_pools)

    @property
    def default_pool_name(self) -> str:
        return self.default_resource_pool or self.resource_pools[0].name

    @property
    def default_pool(self) -> ResourcePool:
        return self.pool(self.default_pool_name)

    def pool(self, name: str | None = None) -> ResourcePool:
        """The named pool, or the default pool for None; KeyError when there is none."""
        wanted = name or self.default_pool_name
        for pool in self.resource_pools:
            if pool.name == wanted:
                return pool
        raise KeyError(wanted)
