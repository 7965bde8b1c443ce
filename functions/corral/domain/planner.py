"""The planner: how many instances of which offering a pool needs for its unplaced demand.

Demand the scheduler could not place is matched, in order, against:
1. instances already on their way (QUEUED, REQUESTED, ALLOCATED) that were launched *for*
   a trial still waiting (their ``planned_for``): that trial is covered, nothing new;
2. free GPUs left on agents, agents drained for idleness (taken back instead of a launch),
   and the unclaimed room on instances on their way;
3. new instances, bought per trial at the lowest price per *useful* GPU (an 8-GPU instance
   is no bargain for one 1-GPU trial), from offerings the cloud has not recently refused;
   while the pool is under arrival pressure every GPU counts as useful and the biggest of
   the equally cheap shapes is bought (see ``_Buyer.choose``).
   A gang larger than any one instance is planned on instances of one instance type (the
   scheduler places gangs uniform only), on the fewest instances that cover it and that
   max_instances and the budget allow, then the cheapest: distributed training wants few,
   large nodes, and eight 1-GPU instances can be cheaper per GPU but over max_instances.
   Entirely free agents of that type (existing, or coming with unclaimed room) count first;
   only the rest is bought, and a gang partly covered by launches on their way keeps the
   agents it counts on reserved (or gets the instances it lost).
On-demand offerings of a spot pool (fallback capacity) are planned for a trial only once it
has waited the pool's ``on_demand_fallback_after`` for spot (``corral.domain.fallback``);
until then a trial no spot offering can serve waits, and its pending reason says until when.
Step 1 makes planning idempotent: the same demand, planned again, launches nothing. The
count is clamped to ``max_instances`` (a gang that cannot get every instance launches none)
and to the monthly budget; ``min_instances`` is topped up with the cheapest offering.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from corral.domain.backoff import blocked_reason as pool_blocked_reason
from corral.domain.cost import BUDGET_LOOKAHEAD_H, budget_allows
from corral.domain.fallback import (
    allowed_offerings,
    no_fallback_setting,
    queued_waits_for_spot,
    spot_wait_reason,
)
from corral.domain.instance import Instance, InstanceState
from corral.domain.offerings import Offering
from corral.domain.packing import Bin, BinIndex, Parts
from corral.domain.policy import PoolPolicy
from corral.domain.records import PoolState
from corral.domain.trial import Trial

# A pool that had to launch for waiting trials this recently is under arrival pressure
# (two hours: bursts of submissions in the published traces come in waves of hours).
PRESSURE_WINDOW_S = 7200.0
# Offerings whose GPU-hour is within this fraction of the cheapest count as equally cheap.
PRICE_TIE = 0.01


@dataclass(frozen=True, slots=True)
class PlannedLaunch:
    offering: Offering
    # The demand it is for: (trial id, GPUs on this instance). Empty for min_instances.
    planned_for: tuple[tuple[str, int], ...]
    reason: str

    @property
    def trial_ids(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.planned_for)


@dataclass(frozen=True, slots=True)
class PoolPlan:
    pool: str
    launches: tuple[PlannedLaunch, ...] = ()
    # Existing agents the plan counts on: the reaper must not take them away.
    reserved: frozenset[str] = frozenset()
    # Starting records no demand needs any more (QUEUED, or an unfilled spot request).
    surplus: tuple[str, ...] = ()
    # Why each unplaced trial still waits (shown to users as pending_reason).
    pending_reasons: Mapping[str, str] = field(default_factory=dict)
    # Trials no launch (planned now or on its way) and no room that exists serves: they wait
    # for the pool itself to change (max_instances, budget, backoff, breaker, refusals).
    unserved: frozenset[str] = frozenset()
    # Instances the pool is short of under max_instances to serve the waiting demand: the
    # reaper makes that much room by retiring idle agents the plan does not count on
    # (agents of a shape no waiting trial can use would otherwise hold the room until their
    # idle period ends).
    room_needed: int = 0
    # The pool's spend this month, as planned with (None: not known): the reaper keeps no
    # stopped instance the budget could not start again (``cost.could_start_this_month``).
    month_to_date_usd: float | None = None


# A gang's records change together in one commit, and DynamoDB's TransactWriteItems takes
# at most 100 items: assigning writes the trial and every member (a bigger gang was accepted
# and then failed every schedule pass of the cluster), and a member's termination writes the
# trial, every member and the pool state. So a gang spans at most 98 instances.
MAX_GANG_INSTANCES = 98


def gang_instances_limit(pool: PoolPolicy) -> int:
    """The most instances one trial of ``pool`` may span."""
    return min(pool.max_instances, MAX_GANG_INSTANCES)


def max_trial_slots(pool: PoolPolicy) -> int:
    """The largest trial a pool can ever run: as many instances of its biggest offering as
    one gang may span (gangs are uniform, so a bigger one could only mix instance types)."""
    biggest = max((o.slots for o in pool.offerings()), default=0)
    return biggest * gang_instances_limit(pool)


def instances_needed(slots: int, offering: Offering) -> int:
    """Instances of ``offering`` a trial of ``slots`` GPUs takes (a uniform gang)."""
    return max(1, -(-slots // max(offering.slots, 1)))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def infeasible_reason(slots: int, pool: PoolPolicy) -> str | None:
    """Why a trial of ``slots`` GPUs can never run in ``pool``, or None if it can.

    It can when some offering covers it within ``max_instances`` and one hour of those
    instances, on an otherwise empty pool at the start of a month, fits the monthly budget.
    """
    offerings = [o for o in pool.offerings() if o.slots > 0 or slots == 0]
    if not offerings:
        return f"pool {pool.name} has no instance type to launch"
    if pool.max_instances <= 0:
        return f"pool {pool.name} has max_instances 0"
    limit = max_trial_slots(pool)
    if slots > limit:
        span = gang_instances_limit(pool)
        each = limit // span
        if span < pool.max_instances:
            return (
                f"needs {slots} GPUs but a trial spans at most {MAX_GANG_INSTANCES} instances:"
                f" {limit} GPUs in pool {pool.name} ({_count(each, 'GPU')} each)"
            )
        return (
            f"needs {slots} GPUs but pool {pool.name} holds at most {limit} "
            f"({_count(span, 'instance')} x {_count(each, 'GPU')})"
        )
    budget = pool.monthly_budget_usd
    if budget is not None:
        span = gang_instances_limit(pool)
        within = [o for o in offerings if instances_needed(slots, o) <= span]
        disk = pool.disk_hourly_usd
        cheapest = min((o.hourly_price + disk) * instances_needed(slots, o) for o in within)
        if cheapest * BUDGET_LOOKAHEAD_H > budget:
            return (
                f"needs {slots} GPUs, at least ${cheapest:,.2f} an hour in pool {pool.name}, "
                f"more than its monthly budget of ${budget:,.2f}"
            )
    return None


def _burn_usd_per_hour(
    pool: PoolPolicy, live: Sequence[Instance], instances: Sequence[Instance]
) -> float:
    """What the pool costs an hour for the budget gate: the compute and disks of what runs
    or is coming (``live``), and the disks of the warm pool's stopped instances."""
    stopped = [i for i in instances if i.pool == pool.name and i.is_parked and i.cloud_id]
    compute = sum(i.offering.hourly_price for i in live)
    return compute + pool.disk_hourly_usd * (len(live) + len(stopped))


def _is_reusable(instance: Instance) -> bool:
    """A drained-for-idleness agent that new demand can take back instead of a launch."""
    return instance.drained_for_idleness and not instance.allocations


def _describe(offering: Offering) -> str:
    return f"{offering.instance_type} ({offering.capacity_type.value}, {offering.location})"


def _bin(inst: Instance, free: Sequence[int], hypothetical: bool = False) -> Bin:
    off = inst.offering
    return Bin(inst.id, off.instance_type, inst.slots, list(free), off.hourly_price, hypothetical)


@dataclass
class _Buyer:
    """New instances bought during one planning pass, within max_instances and budget."""

    pool: PoolPolicy
    headroom: int
    burn_usd_per_hour: float
    month_to_date_usd: float
    offerings: list[Offering]  # every offering the cloud has not recently refused
    now: float = 0.0
    bought: dict[str, Offering] = field(default_factory=dict)
    demand: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    under_pressure: bool = False
    room_needed: int = 0  # the largest shortfall under max_instances a refusal met

    def for_trial(self, trial: Trial) -> list[Offering]:
        """The offerings that may be bought for ``trial`` now: fallback (on-demand)
        offerings only once it has waited the pool's on_demand_fallback_after."""
        return allowed_offerings(self.pool, self.offerings, [trial], self.now)

    def held_back(self, allowed: Sequence[Offering]) -> bool:
        """True when fallback offerings the cloud would take are withheld (``allowed`` is
        what a trial may get) and no spot offering is left: the trial waits for spot."""
        spot_left = any(o.is_spot for o in allowed)
        return not spot_left and len(allowed) < len(self.offerings)

    def choose(
        self, slots: int, behind: Counter[int], offerings: Sequence[Offering]
    ) -> Offering | None:
        """Cheapest offering per useful GPU for this trial and the demand behind it.

        Under arrival pressure (the pool launched for demand within ``PRESSURE_WINDOW_S``)
        every GPU of an instance counts as useful: trials keep arriving, the scheduler's best
        fit fills the spare GPUs before any whole agent, and spare GPUs on a registered agent
        are what lets the next trial start without waiting for a boot. Among offerings within
        ``PRICE_TIE`` of the cheapest GPU-hour the bigger one is taken then (more spare room
        for the burst at no higher price). Otherwise, right-size: an 8-GPU instance is no
        bargain for one 1-GPU trial when nothing else is coming.
        """
        fits = [o for o in offerings if o.slots >= max(slots, 1)]
        if not fits:
            return None  # a gang over several instances: see _buy_gang
        if self.under_pressure:
            cheapest = min(o.price_per_slot_hour for o in fits)
            near = [o for o in fits if o.price_per_slot_hour <= cheapest * (1 + PRICE_TIE)]
            return min(near, key=lambda o: (not o.is_spot, -o.slots, o.price_per_slot_hour))

        def score(o: Offering) -> tuple[float, bool, int]:
            # GPUs of the demand still behind this trial that could share the instance.
            sharing = sum(n * size for size, n in behind.items() if size <= o.slots)
            useful = min(o.slots, max(sharing + slots, 1))
            return (o.hourly_price / useful, not o.is_spot, o.slots)

        return min(fits, key=score)

    def refusal(self, offering: Offering, count: int = 1) -> str | None:
        """Why ``count`` more instances of ``offering`` may not be bought now, or None."""
        if self.headroom < count:
            return f"pool {self.pool.name} is at max_instances ({self.pool.max_instances})"
        extra = (offering.hourly_price + self.pool.disk_hourly_usd) * count
        if not budget_allows(self.pool, self.month_to_date_usd, self.burn_usd_per_hour, extra):
            return (
                f"pool {self.pool.name} would exceed its monthly budget of "
                f"${self.pool.monthly_budget_usd or 0:,.2f}"
            )
        return None

    def note_short(self, count: int) -> None:
        """A purchase of ``count`` instances was refused: remember how far it fell short of
        max_instances (a budget refusal is no shortage of room)."""
        if self.headroom < count:
            self.room_needed = max(self.room_needed, count - self.headroom)

    def gang_options(
        self, index: BinIndex, slots: int, offerings: Sequence[Offering]
    ) -> list[tuple[Offering, list[Bin], int]]:
        """Ways to cover a gang with one instance type, best first: (offering, entirely free
        bins of its type to use, instances to buy). Fewest instances in all, then the
        cheapest to buy, then spot, then the pool's order of offerings."""
        options: list[tuple[tuple[int, float, bool, int], Offering, list[Bin], int]] = []
        for n, offering in enumerate(offerings):
            if offering.slots <= 0:
                continue
            needed = instances_needed(slots, offering)
            if needed > MAX_GANG_INSTANCES:
                continue  # too many agents for the one commit that assigns them
            reuse = index.fully_free_of(offering.instance_type)[:needed]
            new = needed - len(reuse)
            key = (needed, new * offering.hourly_price, not offering.is_spot, n)
            options.append((key, offering, reuse, new))
        options.sort(key=lambda o: o[0])
        return [(offering, reuse, new) for _, offering, reuse, new in options]

    def buy(self, offering: Offering) -> Bin:
        self.headroom -= 1
        self.burn_usd_per_hour += offering.hourly_price + self.pool.disk_hourly_usd
        bin_id = f"new-{len(self.bought)}"
        self.bought[bin_id] = offering
        self.demand[bin_id] = []
        return Bin(
            bin_id,
            offering.instance_type,
            offering.slots,
            list(range(offering.slots)),
            offering.hourly_price,
            hypothetical=True,
        )


def plan_pool(
    pool: PoolPolicy,
    unplaced: Sequence[Trial],
    instances: Sequence[Instance],
    state: PoolState,
    now: float,
    *,
    leftover_free: Mapping[str, tuple[int, ...]] | None = None,
    month_to_date_usd: float = 0.0,
) -> PoolPlan:
    """Plan one pool. ``instances`` are the pool's records; terminal ones are ignored."""
    live = [i for i in instances if i.holds_capacity and i.pool == pool.name]
    starting = {i.id: i for i in live if i.is_starting}
    by_id = {t.id: t for t in unplaced}
    reasons: dict[str, str] = {}

    # 1. Trials covered by an instance launched for them.
    blocked = pool_blocked_reason(state, now)
    claimed: Counter[str] = Counter()
    launched_for: dict[str, list[tuple[Instance, int]]] = {}
    unserved: set[str] = set()
    for inst in starting.values():
        for trial_id, gpus in inst.planned_for:
            if trial_id in by_id:
                claimed[inst.id] += gpus
                if trial_id not in unserved:
                    reasons[trial_id] = _starting_reason(inst, blocked)
                    if blocked is None and inst.state is InstanceState.QUEUED:
                        trial = by_id[trial_id]
                        # A capacity refusal sent it back to QUEUED with a new attempt
                        # that does not count as a launch failure.
                        refused = inst.attempt > inst.launch_failures
                        if queued_waits_for_spot(pool, inst.offering, refused, trial, now):
                            reasons[trial_id] = spot_wait_reason(pool, trial)
                launched_for.setdefault(trial_id, []).append((inst, gpus))
                if blocked is not None and inst.state is InstanceState.QUEUED:
                    unserved.add(trial_id)  # its launch waits for the pool to unblock
    covered = set(reasons)

    # 2. Room on what exists or is coming.
    leftover = leftover_free or {}
    surviving = _survivors_of_broken_gangs(unplaced, {i.id: i for i in live})
    index = BinIndex()
    for inst in sorted(live, key=lambda i: i.id):
        if inst.is_schedulable:
            free = leftover.get(inst.id, inst.free_gpus)
            if inst.id in surviving:
                free = tuple(sorted({*free, *surviving[inst.id]}))
            if free:
                index.add(_bin(inst, free))
        elif _is_reusable(inst):
            index.add(_bin(inst, range(inst.slots)))
        elif inst.id in starting and claimed[inst.id] < inst.slots:
            index.add(_bin(inst, range(claimed[inst.id], inst.slots), hypothetical=True))

    buyer = _Buyer(
        pool=pool,
        headroom=max(pool.max_instances - len(live), 0),
        burn_usd_per_hour=_burn_usd_per_hour(pool, live, instances),
        month_to_date_usd=month_to_date_usd,
        offerings=[o for o in pool.offerings() if state.capacity.is_available(o.key, now)],
        now=now,
        under_pressure=under_pressure(live, now),
    )
    used: set[str] = set(claimed)
    # 1b. A gang only partly covered by launches on their way (the rest was planned on
    # agents that exist, or one of its launches failed): the rest again, on its type.
    for trial in unplaced:
        covering = launched_for.get(trial.id)
        rest = trial.slots - sum(gpus for _, gpus in covering or ())
        if not covering or rest <= 0:
            continue
        parts, reason = _complete_gang(buyer, index, trial, covering[0][0], rest, blocked)
        if parts is None:
            reasons[trial.id] = reason
            unserved.add(trial.id)
            continue
        used.update(bin_id for bin_id, _ in parts)
        if any(bin_id in buyer.bought for bin_id, _ in parts):
            reasons[trial.id] = _waiting_reason(trial, parts, buyer, starting)

    behind = Counter(t.slots for t in unplaced if t.id not in covered)
    for trial in unplaced:
        if trial.id in covered:
            continue
        behind[trial.slots] -= 1
        # Uniform gangs only (as the scheduler places them): a gang mixing instance types
        # could be placed differently once the bought instances exist.
        parts = index.place(trial.slots)
        if parts is None:
            parts, reason = _buy_for(buyer, index, trial, blocked, behind)
            if parts is None:
                reasons[trial.id] = reason
                unserved.add(trial.id)
                continue
        used.update(bin_id for bin_id, _ in parts)
        reasons[trial.id] = _waiting_reason(trial, parts, buyer, starting)

    if blocked is None:
        _top_up_min(buyer, len(live))
    launches = tuple(
        PlannedLaunch(offering, tuple(buyer.demand[bin_id]), _launch_reason(pool, buyer, bin_id))
        for bin_id, offering in buyer.bought.items()
    )
    existing = {i.id for i in live}
    reserved = frozenset((used & existing) - set(starting))
    surplus = _surplus(pool, starting, used, len(live))
    return PoolPlan(
        pool.name,
        launches,
        reserved,
        surplus,
        reasons,
        frozenset(unserved),
        room_needed=buyer.room_needed,
        month_to_date_usd=month_to_date_usd,
    )


def _survivors_of_broken_gangs(
    unplaced: Sequence[Trial], live: Mapping[str, Instance]
) -> dict[str, set[int]]:
    """GPUs of a gang's surviving members, by instance, for a gang that lost a member.

    Such a trial waits for its survivors to stop it, then is placed again; their GPUs come
    free for it, so they are room to plan with. Counting them busy bought a whole new gang
    for one lost member (two 4-GPU instances for an 8-GPU trial, one of them never used).
    Only broken gangs: a trial moved off an agent on purpose (back to spot, consolidation)
    must not be planned onto it again."""
    found: dict[str, set[int]] = {}
    for trial in unplaced:
        placement = trial.placement
        parts = placement.parts if placement is not None else ()
        members = [live.get(instance_id) for instance_id, _ in parts]
        # Broken: a member is gone or going, or was already cut from the placement (a LOST
        # member at once, an interrupted one when it confirms its stop before the others).
        shrunk = placement is not None and placement.slots < trial.slots
        intact = all(m is not None and m.is_schedulable for m in members)
        if not parts or (intact and not shrunk):
            continue
        for (instance_id, gpus), member in zip(parts, members, strict=True):
            if member is not None and member.is_schedulable:
                found.setdefault(instance_id, set()).update(gpus)
    return found


def under_pressure(live: Sequence[Instance], now: float) -> bool:
    """Whether trials arrived faster than free GPUs lately: an instance launched for
    waiting trials (not for min_instances) within ``PRESSURE_WINDOW_S`` is still live. When
    it was planned is when it last entered QUEUED: a warm start's record is old, its launch
    is not."""
    return any(
        i.planned_for
        and now - (i.entered_at(InstanceState.QUEUED) or i.created_at) <= PRESSURE_WINDOW_S
        for i in live
    )


def _buy_for(
    buyer: _Buyer, index: BinIndex, trial: Trial, blocked: str | None, behind: Counter[int]
) -> tuple[Parts | None, str]:
    """Buy new instances for one trial: one that fits it, or a uniform gang."""
    if blocked is not None:
        return None, blocked
    if not buyer.offerings:
        return None, _no_offering_reason(buyer.pool)
    allowed = buyer.for_trial(trial)
    if buyer.held_back(allowed):
        return None, spot_wait_reason(buyer.pool, trial)
    offering = buyer.choose(trial.slots, behind, allowed)
    if offering is None:
        return _buy_gang(buyer, index, trial, allowed)
    refusal = buyer.refusal(offering)
    if refusal is not None:
        buyer.note_short(1)
        return None, refusal
    fresh = BinIndex.of([buyer.buy(offering)])
    parts = fresh.place(trial.slots)
    assert parts is not None, "the offering holds the trial"
    for b in fresh.bins():
        index.add(b)  # leftover room on what was bought serves the demand behind
    return parts, ""


def _buy_gang(
    buyer: _Buyer, index: BinIndex, trial: Trial, allowed: Sequence[Offering]
) -> tuple[Parts | None, str]:
    """A trial larger than any one offering it may get: the fewest instances of one type that
    the pool may still buy, then the cheapest, counting entirely free agents of that type
    first."""
    options = buyer.gang_options(index, trial.slots, allowed)
    first_refusal = ""
    for offering, reuse, new in options:
        refusal = buyer.refusal(offering, new) if new else None
        if refusal is None:
            return _take_gang(buyer, index, trial.slots, offering, reuse, new), ""
        if not first_refusal:
            first_refusal = f"{refusal}: the trial needs {_instances(new, offering)}"
    if options:
        buyer.note_short(min(new for _, _, new in options))
    return None, first_refusal or _no_offering_reason(buyer.pool)


def _complete_gang(
    buyer: _Buyer,
    index: BinIndex,
    trial: Trial,
    launched: Instance,
    rest: int,
    blocked: str | None,
) -> tuple[Parts | None, str]:
    """The part of a gang its launches on their way do not cover: on entirely free agents of
    their instance type, else on new ones of that type."""
    kind = launched.offering.instance_type
    allowed = buyer.for_trial(trial)
    same = [o for o in allowed if o.instance_type == kind]
    offering = launched.offering if launched.offering in same else next(iter(same), None)
    needed = instances_needed(rest, launched.offering)
    reuse = index.fully_free_of(kind)[:needed]
    new = needed - len(reuse)
    if new == 0:
        return index.take_whole(reuse, rest), ""
    if blocked is not None:
        return None, blocked
    if offering is None and len(allowed) < len(buyer.offerings):
        return None, spot_wait_reason(buyer.pool, trial)
    if offering is None:
        return None, (
            f"{_no_offering_reason(buyer.pool)}: the trial needs "
            f"{new} more {kind} to join {launched.id}"
        )
    refusal = buyer.refusal(offering, new)
    if refusal is not None:
        buyer.note_short(new)
        return None, f"{refusal}: the trial needs {_instances(new, offering)} more"
    return _take_gang(buyer, index, rest, offering, reuse, new), ""


def _take_gang(
    buyer: _Buyer, index: BinIndex, slots: int, offering: Offering, reuse: list[Bin], new: int
) -> Parts:
    fresh = [buyer.buy(offering) for _ in range(new)]
    for b in fresh:
        index.add(b)  # leftover room on what was bought serves the demand behind
    return index.take_whole([*reuse, *fresh], slots)


def _instances(count: int, offering: Offering) -> str:
    return f"{count} instance{'s' if count != 1 else ''} of {_describe(offering)}"


def _waiting_reason(
    trial: Trial, parts: Parts, buyer: _Buyer, starting: Mapping[str, Instance]
) -> str:
    waiting_on: list[str] = []
    for bin_id, gpus in parts:
        if bin_id in buyer.bought:
            buyer.demand[bin_id].append((trial.id, len(gpus)))
            waiting_on.append(f"a new {_describe(buyer.bought[bin_id])}")
        elif bin_id in starting:
            waiting_on.append(_starting_reason(starting[bin_id], None).removeprefix("waiting for "))
    if waiting_on:
        return "waiting for " + ", ".join(sorted(set(waiting_on)))
    # Fits on GPUs of agents already up, or one being taken back from draining: the next
    # scheduling pass places it.
    return "waiting for the next scheduling pass"


def _starting_reason(inst: Instance, blocked: str | None) -> str:
    if inst.state is InstanceState.QUEUED:
        return blocked or f"waiting for {inst.id} to be launched"
    if inst.state is InstanceState.REQUESTED:
        what = "spot request to be filled" if inst.spot_request_id else "launch to complete"
        return f"waiting for {inst.id}: {what}"
    return f"waiting for {inst.id} to boot and register"


def _top_up_min(buyer: _Buyer, live_count: int) -> None:
    missing = buyer.pool.min_instances - live_count - len(buyer.bought)
    # Capacity for no trial waits for spot (unless the pool falls back at once).
    offerings = allowed_offerings(buyer.pool, buyer.offerings, [], buyer.now)
    if missing <= 0 or not offerings:
        return
    cheapest = min(offerings, key=lambda o: (o.hourly_price, not o.is_spot))
    for _ in range(missing):
        if buyer.refusal(cheapest) is not None:
            return
        buyer.buy(cheapest)


def _launch_reason(pool: PoolPolicy, buyer: _Buyer, bin_id: str) -> str:
    trial_ids = [t for t, _ in buyer.demand[bin_id]]
    if not trial_ids:
        return f"min_instances is {pool.min_instances}"
    shown = ", ".join(trial_ids[:3]) + (" ..." if len(trial_ids) > 3 else "")
    return f"demand of {len(trial_ids)} pending trial(s): {shown}"


def _surplus(
    pool: PoolPolicy, starting: Mapping[str, Instance], used: set[str], live_count: int
) -> tuple[str, ...]:
    """Starting records nothing needs and that can still be undone, keeping min_instances."""
    undoable = [
        i
        for i in starting.values()
        if i.id not in used
        and (
            i.state is InstanceState.QUEUED
            or (i.state is InstanceState.REQUESTED and i.spot_request_id and not i.cloud_id)
        )
    ]
    allowed = max(live_count - pool.min_instances, 0)
    undoable.sort(key=lambda i: (i.state is not InstanceState.QUEUED, -i.created_at, i.id))
    return tuple(i.id for i in undoable[:allowed])


def _no_offering_reason(pool: PoolPolicy) -> str:
    if not pool.offerings():
        return f"pool {pool.name} has no instance type to launch"
    if pool.on_demand_fallback_after_s is None and all(o.is_spot for o in pool.offerings()):
        return (
            f"every spot offering of pool {pool.name} was recently refused by the cloud "
            f"and {no_fallback_setting(pool)}"
        )
    return f"every offering of pool {pool.name} was recently refused by the cloud"
