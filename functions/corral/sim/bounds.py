"""Lower bounds on what a provisioning policy that starts jobs on arrival pays for a trace.

The simulator's oracle (``metrics.measure``) prices every job's GPU-seconds at the cheapest
GPU-hour: it assumes GPUs can be bought one at a time. A cloud sells whole instances, so
while three 1-GPU jobs run on a pool whose only shape has four GPUs, somebody pays for the
fourth. ``packing_bound_usd`` prices that: every job runs from its arrival for its
duration, and at every instant the running GPUs are covered by the cheapest set of
instances that holds them, re-packed for free at every arrival and departure, with no boot,
no idle period, no capacity outage and no instance limit.

No policy that starts every job on arrival can pay less (each relaxation only lowers the
cost), so a cost target below this bound is out of reach for such policies on that workload,
which is what ``benchmarks/sim_workloads.py`` reports. It is not a bound for a policy that
makes jobs wait: one could hold a small job back until GPUs an instance already pays for
come free.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from itertools import pairwise

from corral.domain.offerings import Offering
from corral.sim.trace import Job

HOUR_S = 3600.0


def cover_costs(offerings: Iterable[Offering], most_gpus: int) -> list[float]:
    """``costs[g]``: the least USD an hour that buys instances holding at least ``g`` GPUs,
    any number of each offering, for ``g`` from 0 to ``most_gpus``."""
    shapes = sorted(
        {(o.slots, o.hourly_price) for o in offerings if o.slots > 0 and o.hourly_price > 0}
    )
    if not shapes and most_gpus > 0:
        raise ValueError("no priced offering with GPUs to cover the jobs with")

    @cache
    def least(gpus: int) -> float:
        if gpus <= 0:
            return 0.0
        return min(price + least(gpus - slots) for slots, price in shapes)

    # Filled bottom-up so the recursion never runs deeper than the largest shape.
    return [least(g) for g in range(most_gpus + 1)]


def packing_bound_usd(jobs: Sequence[Job], offerings: Iterable[Offering]) -> float:
    """The least any policy pays for ``jobs``, each running from its arrival for its
    duration, with free, instant re-packing (see the module's docstring)."""
    changes: dict[float, int] = {}
    for job in jobs:
        if job.gpus <= 0 or job.duration_s <= 0:
            continue
        changes[job.submit_s] = changes.get(job.submit_s, 0) + job.gpus
        end = job.submit_s + job.duration_s
        changes[end] = changes.get(end, 0) - job.gpus
    moments = sorted(changes)
    running, peak = 0, 0
    for moment in moments:
        running += changes[moment]
        peak = max(peak, running)
    costs = cover_costs(offerings, peak)
    total, running = 0.0, 0
    for moment, following in pairwise(moments):
        running += changes[moment]
        total += costs[running] * (following - moment) / HOUR_S
    return total
