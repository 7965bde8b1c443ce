"""The figures of one run, and the oracle lower bound they are judged against.

- ``cost_usd``: what the simulated cloud billed for every instance the policy launched
  (per second, 60 s minimum, from running to termination or interruption).
- ``oracle_cost_usd``: every job's GPU-seconds at the cheapest price per GPU-hour of any
  offering the config allows, with no idle time, no boot time and no waiting. No policy can
  pay less for the same work on the same offerings.
- waits: submission to the first start of the job's trial (queueing delay, as the Philly
  and Helios studies report it); time spent pending again after an interruption shows up in
  ``lost_gpu_hours`` and cost instead.
- ``gpu_hours_used``: GPU time trials held while running, work later lost included;
  ``gpu_hours_paid``: GPU time of billed instances; ``idle_gpu_hours`` the difference.
- ``lost_gpu_hours``: work done since a trial's last checkpoint when its instance went away
  (it has to be redone).
- ``restart_gpu_hours``: GPU time resumed trials spent loading their checkpoint
  (``simulation.restart_overhead`` per resume).
- ``on_demand_share``: the share of paid GPU-hours on on-demand instances (0 to 1).
- ``idle_*_gpu_hours``: ``idle_gpu_hours`` by cause (boot, gang, reaping, fragmented; see
  ``corral.sim.idle``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from corral.domain.offerings import Offering
from corral.sim.engine import Replay
from corral.sim.idle import idle_breakdown, on_demand_share, paid_instances

HOUR_S = 3600.0


@dataclass(frozen=True)
class SimMetrics:
    policy: str
    jobs: int
    completed: int
    # Jobs no pool can ever run, refused at submit as the API would (422): never replayed.
    rejected: int
    cost_usd: float
    oracle_cost_usd: float
    cost_ratio: float
    wait_p50_s: float
    wait_p95_s: float
    wait_max_s: float
    gpu_hours_used: float
    gpu_hours_paid: float
    idle_gpu_hours: float
    instances_launched: int
    spot_interruptions: int
    lost_gpu_hours: float
    restart_gpu_hours: float
    launch_failures: int
    on_demand_share: float
    idle_boot_gpu_hours: float
    idle_gang_gpu_hours: float
    idle_reaping_gpu_hours: float
    idle_fragmented_gpu_hours: float
    # What stopped instances' disks cost (a warm pool); part of cost_usd.
    stopped_disk_usd: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def cheapest_gpu_hour(offerings: Iterable[Offering]) -> float:
    """The lowest price per GPU-hour of any offering (0 when none is priced)."""
    prices = [o.hourly_price / o.slots for o in offerings if o.slots > 0 and o.hourly_price > 0]
    return min(prices, default=0.0)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def paid_intervals(replay: Replay) -> list[tuple[float, float, int, float]]:
    """(start, end, GPUs, USD) for every instance the run paid for."""
    return [(p.start, p.end, p.gpus, p.usd) for p in paid_instances(replay)]


def measure(replay: Replay, offerings: Iterable[Offering]) -> SimMetrics:
    """The figures of a finished run; ``offerings``: every offering the config allows."""
    runs = replay.jobs
    per_gpu = cheapest_gpu_hour(offerings)
    oracle = sum(r.job.gpus * r.job.duration_s for r in runs) / HOUR_S * per_gpu
    waits = [r.first_start - r.job.submit_s - replay.start for r in runs if r.first_start]
    instances = paid_instances(replay)
    idle = idle_breakdown(replay)
    cost = replay.cloud.total_billed_usd(replay.end)
    used = sum(r.used_gpu_s for r in runs) / HOUR_S
    paid_gpu_h = sum((p.end - p.start) * p.gpus for p in instances) / HOUR_S
    launched = len(replay.offerings)
    return SimMetrics(
        policy=replay.policy,
        jobs=len(runs) + len(replay.rejected),
        completed=sum(1 for r in runs if r.completed_at is not None),
        rejected=len(replay.rejected),
        cost_usd=round(cost, 2),
        oracle_cost_usd=round(oracle, 2),
        cost_ratio=round(cost / oracle, 4) if oracle > 0 else 0.0,
        wait_p50_s=round(percentile(waits, 50), 1),
        wait_p95_s=round(percentile(waits, 95), 1),
        wait_max_s=round(max(waits, default=0.0), 1),
        gpu_hours_used=round(used, 2),
        gpu_hours_paid=round(paid_gpu_h, 2),
        idle_gpu_hours=round(max(paid_gpu_h - used, 0.0), 2),
        instances_launched=launched,
        spot_interruptions=replay.interruptions,
        lost_gpu_hours=round(sum(r.lost_gpu_s for r in runs) / HOUR_S, 2),
        restart_gpu_hours=round(sum(r.restart_gpu_s for r in runs) / HOUR_S, 2),
        launch_failures=replay.launch_failures,
        on_demand_share=round(on_demand_share(instances), 4),
        idle_boot_gpu_hours=round(idle.boot_gpu_h, 2),
        idle_gang_gpu_hours=round(idle.gang_gpu_h, 2),
        idle_reaping_gpu_hours=round(idle.reaping_gpu_h, 2),
        idle_fragmented_gpu_hours=round(idle.fragmented_gpu_h, 2),
        stopped_disk_usd=round(
            sum(replay.cloud.stopped_usd(c, replay.end) for c in replay.offerings), 2
        ),
    )
