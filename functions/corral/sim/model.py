"""The cloud model of a simulation: the optional ``simulation:`` block of a cluster config.

Defaults, and where they come from (see docs/simulator.md for the longer story):

- **Boot** (launch to agent registration): uniform in ``mean +- jitter``, 3 min +- 1 min. A
  CPU EC2 instance reaches SSH in about 26 s; GPU AMIs that load drivers and pull a large
  training image take minutes (Determined's own default allows 20 min).
- **Spot interruptions**: 0.5 % per running spot instance-hour (exponential). AWS's Spot
  Instance Advisor puts the popular GPU types (p3, g5) in its "> 20 % per month" bucket, and
  measured GPU spot traces (SkyPilot's "Can't Be Late", NSDI'24) show V100/A100 spot
  preempted several times a week to several times a day depending on the zone; 0.5 %/h is
  about one interruption per instance every 8 days. The warning comes ``notice`` ahead
  (2 minutes on AWS, about 30 s on GCP).
- **Capacity**: each offering (type x zone x capacity type) alternates between available
  and out of capacity; ``unavailable_fraction`` of the time it refuses launches
  (InsufficientInstanceCapacity), in outages lasting ``mean_outage`` on average (exponential).
  Defaults: spot 5 % in 30-minute outages, on-demand 1 % in 15-minute ones: large GPU spot
  pools run dry for a while most days; on-demand rarely. Outages are drawn per offering
  from the seed alone, so every policy meets the same outages at the same times.
- **Checkpoints**: trials checkpoint every ``checkpoint_interval`` (30 min) unless a trace row
  says otherwise; work since the last checkpoint is lost when an instance goes away.
- **Restarts**: a resumed trial spends ``restart_overhead`` (2 min) of its GPUs before its
  work goes on (container start, framework init, checkpoint load), whatever the policy.
- **Prices** come from ``corral.domain.catalog`` (dated ``PRICES_AS_OF``) through the pool
  offerings; spot prices are the catalog's typical figures, held constant.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, model_validator

from corral.adapters.memory import SimulatedCloudConfig
from corral.domain import catalog
from corral.domain.config import ClusterConfig
from corral.domain.config.common import FrozenModel
from corral.domain.config.durations import Duration, PositiveDuration
from corral.domain.config.errors import ConfigError, Problem, rule_error
from corral.domain.config.loader import validate
from corral.domain.offerings import Offering


class BootModel(FrozenModel):
    """Launch to agent registration: ``pending`` (the instance is not running yet, and not
    billed), then the OS, drivers and agent image start (billed), for ``mean +- jitter`` in
    all (uniform)."""

    mean: PositiveDuration = 180.0
    jitter: Duration = 60.0
    pending: Duration = 30.0

    @model_validator(mode="after")
    def _parts_fit(self) -> BootModel:
        if self.jitter > self.mean:
            raise rule_error("jitter", "must be <= mean (boot times cannot be negative)")
        if self.pending > self.mean - self.jitter:
            raise rule_error("pending", "must be <= mean - jitter (it is part of the boot)")
        return self


class SpotModel(FrozenModel):
    interruptions_per_hour: float = Field(default=0.005, ge=0, le=1)
    notice: Duration = 120.0


class OutageModel(FrozenModel):
    unavailable_fraction: float = Field(ge=0, lt=1)
    mean_outage: PositiveDuration


class CapacityModel(FrozenModel):
    spot: OutageModel = OutageModel(unavailable_fraction=0.05, mean_outage=1800.0)
    on_demand: OutageModel = OutageModel(unavailable_fraction=0.01, mean_outage=900.0)
    # By instance type or offering key (``type|location|capacity``); the key wins.
    offerings: dict[str, OutageModel] = Field(default_factory=dict)

    def for_offering(self, offering: Offering) -> OutageModel:
        found = self.offerings.get(offering.key) or self.offerings.get(offering.instance_type)
        if found is not None:
            return found
        return self.spot if offering.is_spot else self.on_demand


# Starting a stopped instance to its agent's registration: EC2 StartInstances took 21 s to
# SSH on an m7i.large (1.8 s API, 16.4 s pending -> running, 3 s boot; brevdev/ec2-coldboot-
# research, 2026), against 26 s for a fresh launch of the same instance; a GPU instance adds
# the NVIDIA driver's initialisation and the agent's start (no image pull: the disk kept
# it). Compute Engine publishes no figure; the same model is used for it.
WARM_START = BootModel(mean=45.0, jitter=15.0, pending=15.0)


class SimulationConfig(FrozenModel):
    seed: int = 0
    boot: BootModel = BootModel()
    # A warm pool's start of a stopped instance (see WARM_START).
    warm_start: BootModel = WARM_START
    spot: SpotModel = SpotModel()
    capacity: CapacityModel = CapacityModel()
    checkpoint_interval: PositiveDuration = 1800.0
    # GPU time a resumed trial spends before its work goes on: container start, framework
    # init and loading the checkpoint (a few GB from object storage). Every policy pays it on
    # every resume (after an interruption, a lost instance, or a consolidation move).
    restart_overhead: Duration = 120.0
    # The single instance type of the `determined` baseline (a Determined pool has one);
    # default: the pool's type with the most GPUs, so every trial fits on one agent.
    determined_instance_type: str | None = None

    def cloud_config(
        self, seed: int | None = None, stopped_usd_per_hour: Mapping[str, float] | None = None
    ) -> SimulatedCloudConfig:
        """The simulated cloud's knobs (capacity outages are injected by the engine);
        ``stopped_usd_per_hour``: a stopped instance's disks, by pool."""
        return SimulatedCloudConfig(
            seed=self.seed if seed is None else seed,
            # The cloud models the unbilled pending phase; the engine adds agent start-up.
            boot_s_mean=self.boot.pending,
            boot_s_jitter=0.0,
            start_s_mean=self.warm_start.pending,
            start_s_jitter=0.0,
            stopped_usd_per_hour=dict(stopped_usd_per_hour or {}),
            spot_hazard_per_hour=self.spot.interruptions_per_hour,
            notice_s=self.spot.notice,
        )


def simulation_config(
    block: Mapping[str, Any] | None, cluster: ClusterConfig | None = None
) -> SimulationConfig:
    """Validate a cluster config's ``simulation:`` block; errors are named ``simulation.*``.

    With ``cluster``, also what only the pools can tell (``determined_instance_type``); every
    problem is raised at once. ``corral sim`` and ``corral config validate`` both call this,
    so the two agree on what is wrong and where."""
    problems: list[Problem] = []
    found: SimulationConfig | None = None
    try:
        found = validate(SimulationConfig, block or {})
    except ConfigError as exc:
        problems.extend(
            Problem(f"simulation.{p.path}" if p.path else "simulation", p.reason)
            for p in exc.problems
        )
    if cluster is not None and isinstance(block, Mapping):
        # Checked on the raw value, so a block with other problems still reports this one.
        wanted = block.get("determined_instance_type")
        if isinstance(wanted, str):
            problems.extend(_determined_type_problems(wanted, cluster))
    if problems or found is None:
        raise ConfigError(problems)
    return found


def _determined_type_problems(instance_type: str, cluster: ClusterConfig) -> list[Problem]:
    """The Determined model launches only ``instance_type``, and only from the offerings of
    the pool a job runs in; every simulated job runs in the default pool (a trace names no
    pool). A type that pool does not offer would launch nothing: every job would wait
    forever and the run would report ``completed 0`` at no cost, so it is refused."""
    pool = next(p for p in cluster.resource_pools if p.name == cluster.default_pool_name)
    offered = list(dict.fromkeys(o.instance_type for o in pool.offerings()))
    if instance_type in offered:
        return []
    lookup = catalog.lookup_aws if pool.cloud == "aws" else catalog.lookup_gcp_machine
    types = ", ".join(offered) or "no instance type"
    pool_text = f"the default pool {pool.name!r}, where every simulated job runs"
    reason = (
        f"unknown instance type {instance_type!r} ({pool_text}, offers {types})"
        if lookup(instance_type) is None
        else f"{instance_type!r} is not offered by {pool_text} (it offers {types})"
    )
    return [Problem("simulation.determined_instance_type", reason)]


@dataclass(frozen=True, slots=True)
class Outage:
    offering_key: str
    start: float
    end: float


def outages(
    config: SimulationConfig,
    offerings: Sequence[Offering],
    start: float,
    end: float,
    seed: int | None = None,
) -> list[Outage]:
    """Every capacity outage of ``offerings`` in [start, end), sorted by start.

    An alternating renewal process per offering: up for Exp(mean_up), down for
    Exp(mean_outage), with mean_up chosen so the long-run down fraction is
    ``unavailable_fraction``. Each offering draws from its own stream (seed and key), so
    adding an offering or a policy never shifts another offering's outages.
    """
    base = config.seed if seed is None else seed
    found: list[Outage] = []
    for offering in {o.key: o for o in offerings}.values():
        model = config.capacity.for_offering(offering)
        if model.unavailable_fraction <= 0:
            continue
        rng = random.Random(f"{base}:outage:{offering.key}")
        mean_up = model.mean_outage * (1 - model.unavailable_fraction) / model.unavailable_fraction
        t = start + _exp(rng, mean_up)
        while t < end:
            length = _exp(rng, model.mean_outage)
            found.append(Outage(offering.key, t, t + length))
            t += length + _exp(rng, mean_up)
    found.sort(key=lambda o: (o.start, o.offering_key))
    return found


def _exp(rng: random.Random, mean: float) -> float:
    return -math.log(1.0 - rng.random()) * mean
