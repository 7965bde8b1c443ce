"""Cost accounting: what instances cost, what each trial owes, and the monthly budget gate.

Billing model: EC2 (Linux) and Compute Engine both bill per second with a 60-second minimum
per instance run, so an instance costs ``hourly_price * max(seconds, 60) / 3600``. Prices are
the offering's ``hourly_price`` (the planning price: on-demand list price, or the spot price
known when the pool was configured), so figures are estimates, not invoices.

When billing starts: ``launched_at`` (the cloud's launch time). A record that holds a cloud
id but never learned a launch time (an adopted instance, a lost write) falls back to
``requested_at``, then to when it entered ALLOCATED, then to ``created_at``: all earlier than
the real launch, so the estimate errs high, which is the safe side for a budget. A record
that never got a cloud instance (QUEUED, an unfilled spot request, CANCELLED,
ALLOCATION_FAILED without a cloud id) cost nothing.

Disks: an instance's boot disk (the pool's ``disk_hourly_usd``) bills from its first launch
(``Instance.disk_since``) until it is terminated, whether it runs or is stopped in the warm
pool, where it is all the instance costs. Its compute bills per run, as above.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from corral.domain.instance import HOLDS_CLOUD_INSTANCE, Instance, InstanceState
from corral.domain.offerings import Offering
from corral.domain.policy import PoolPolicy

MIN_BILLED_S = 60.0
HOUR_S = 3600.0
# How far ahead the budget gate looks: see ``budget_allows``.
BUDGET_LOOKAHEAD_H = 1.0


def billing_start(instance: Instance) -> float | None:
    """When the cloud started billing for this record's instance, or None if it never had
    one (see the module docstring for the fallbacks)."""
    if instance.launched_at is not None:
        return instance.launched_at
    if instance.cloud_id is None:
        return None
    if instance.requested_at is not None:
        return instance.requested_at
    allocated = instance.entered_at(InstanceState.ALLOCATED)
    return allocated if allocated is not None else instance.created_at


def billed_interval(instance: Instance, now: float) -> tuple[float, float] | None:
    """[start, end) the instance is billed for, the 60 s minimum included, or None. None too
    when its latest run ended in the warm pool: that run's spend was closed when it was
    stopped, and a warm start bills from its new launch time."""
    if instance.run_closed:
        return None
    start = billing_start(instance)
    if start is None:
        return None
    end = instance.terminated_at if instance.terminated_at is not None else now
    # The minimum is owed as soon as the instance exists, so a running one is charged it too.
    return start, start + max(end - start, MIN_BILLED_S)


def disk_interval(instance: Instance, now: float) -> tuple[float, float] | None:
    """[start, end) the instance's disks are billed for, or None if it never had a cloud
    instance: from its first launch (the compute billing start of a record that never learned
    one) until it was terminated."""
    if instance.cloud_id is None:
        return None
    start = instance.disk_since if instance.disk_since is not None else billing_start(instance)
    if start is None:
        return None
    end = instance.terminated_at if instance.terminated_at is not None else now
    return start, max(end, start)


def compute_cost_usd(instance: Instance, now: float) -> float:
    """What the instance's compute has cost: its runs before its last stop (a warm pool),
    and the billed interval of the current one. Its disks are not included."""
    interval = billed_interval(instance, now)
    if interval is None:
        return instance.closed_usd
    start, end = interval
    return instance.closed_usd + instance.offering.hourly_price * (end - start) / HOUR_S


def instance_cost_usd(instance: Instance, now: float, disk_hourly_usd: float = 0.0) -> float:
    """What the instance has cost: its compute and its disks."""
    disks = disk_interval(instance, now)
    disk_usd = 0.0 if disks is None else disk_hourly_usd * (disks[1] - disks[0]) / HOUR_S
    return compute_cost_usd(instance, now) + disk_usd


@dataclass(frozen=True, slots=True)
class RunSegment:
    """A stretch of time a trial held ``gpus`` GPUs on one instance of ``offering``."""

    offering: Offering
    gpus: int
    start: float
    end: float


def trial_cost_share(segment: RunSegment) -> tuple[float, float]:
    """``(cost_usd, gpu_seconds)`` a trial owes for one run segment: the instance's price x
    (gpus held / instance slots) x the time it held them.

    Cost is attributed per GPU slot: zero-GPU work, and CPU-only offerings (0 slots), owe
    nothing here; their cost shows on the instance. Idle time on an agent is owed by no
    trial (it shows on the pool), so the shares never add up to more than the instance cost.
    No 60 s minimum here: the minimum is the instance's, not any one trial's.
    """
    seconds = max(segment.end - segment.start, 0.0)
    gpu_seconds = segment.gpus * seconds
    slots = segment.offering.slots
    if slots <= 0 or segment.gpus <= 0:
        return 0.0, gpu_seconds
    fraction = min(segment.gpus / slots, 1.0)
    return segment.offering.hourly_price * fraction * seconds / HOUR_S, gpu_seconds


def month_start_utc(now: float) -> float:
    """00:00 UTC on the first day of the calendar month that ``now`` falls in."""
    moment = datetime.fromtimestamp(now, tz=UTC)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()


def month_to_date_usd(
    instances: Iterable[Instance], now: float, disk_hourly_usd: float = 0.0
) -> float:
    """Cost of the given (one pool's) instances billed since the start of this UTC month:
    the compute of their current runs and, at ``disk_hourly_usd``, their disks.

    Each billed interval is clipped to [month start, ...): an instance that started last
    month counts only this month's seconds. Terminal records count too, so callers must pass
    the records terminated this month, not only the live ones. Runs before a stop into the
    warm pool are not here: their spend was closed at the stop.
    """
    since = month_start_utc(now)
    total = 0.0
    for instance in instances:
        interval = billed_interval(instance, now)
        if interval is not None:
            start, end = interval
            total += instance.offering.hourly_price * max(end - max(start, since), 0) / HOUR_S
        disks = disk_interval(instance, now) if disk_hourly_usd else None
        if disks is not None:
            start, end = disks
            total += disk_hourly_usd * max(end - max(start, since), 0) / HOUR_S
    return total


def hourly_burn_usd(instances: Iterable[Instance], disk_hourly_usd: float = 0.0) -> float:
    """What the given instances cost per hour right now: the compute of those running, the
    disks of every one holding a cloud instance (stopped ones included)."""
    held = [i for i in instances if i.state in HOLDS_CLOUD_INSTANCE and i.cloud_id is not None]
    compute = sum(i.offering.hourly_price for i in held if not i.is_parked)
    return compute + disk_hourly_usd * len(held)


def budget_allows(
    pool: PoolPolicy,
    month_to_date_usd: float,
    current_hourly_burn_usd: float,
    extra_hourly_usd: float,
) -> bool:
    """Whether a launch adding ``extra_hourly_usd`` fits the pool's monthly budget.

    Rule: spend so far this month plus one more hour of the pool's burn, the new instance
    included, must stay within ``monthly_budget_usd``. One hour because the planner runs at
    least every minute and an operator can act within the hour; an instance launched under
    the rule can overrun by at most about one hour of burn. The budget gates launches only:
    it never stops a running trial (never disrupt a trial to save money unless allowed).
    A pool without a budget always allows.
    """
    budget = pool.monthly_budget_usd
    if budget is None:
        return True
    projected = current_hourly_burn_usd + extra_hourly_usd
    return month_to_date_usd + projected * BUDGET_LOOKAHEAD_H <= budget


def could_start_this_month(pool: PoolPolicy, offering: Offering, month_to_date_usd: float) -> bool:
    """Whether the month's budget still has room for one instance of ``offering`` (its
    compute and disk for the gate's hour) with nothing else of the pool running.

    The most the budget could ever allow before the month ends: unlike
    ``BudgetState.exhausted``, which counts the current burn and clears as the fleet shrinks,
    a False here clears only with the next month. The reaper keeps no stopped instance that
    fails it: nothing could start it again, and its disk would only spend more of what is
    over."""
    extra = offering.hourly_price + pool.disk_hourly_usd
    return budget_allows(pool, month_to_date_usd, 0.0, extra)


@dataclass(frozen=True, slots=True)
class BudgetState:
    """The budget line of a pool listing."""

    spent_usd: float
    budget_usd: float | None
    remaining_usd: float | None
    # The budget is reached, or the current burn reaches it within the hour: no launch fits.
    exhausted: bool


def budget_state(
    pool: PoolPolicy, month_to_date_usd: float, current_hourly_burn_usd: float
) -> BudgetState:
    budget = pool.monthly_budget_usd
    if budget is None:
        return BudgetState(month_to_date_usd, None, None, exhausted=False)
    return BudgetState(
        spent_usd=month_to_date_usd,
        budget_usd=budget,
        remaining_usd=max(budget - month_to_date_usd, 0.0),
        exhausted=not budget_allows(pool, month_to_date_usd, current_hourly_burn_usd, 0.0),
    )
