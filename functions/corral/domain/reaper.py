"""The reaper: which idle agents to drain, which drained ones to terminate or take back.

Two steps, never one: an agent idle too long is first *drained* (IDLE -> DRAINING: the
scheduler gives it no new work), and only on a later pass, once it is confirmed empty (no
allocations on the record, no trial in its latest heartbeat), *terminated* (DRAINING ->
TERMINATING). The pass in between lets a racing assignment or a late heartbeat show up, so a
running trial is never killed to save money (Determined picked idle victims at random and,
enforcing ``max_instances``, could kill busy ones).

Counting for ``min_instances`` and ``max_instances``: an agent *stays* when it is IDLE or
BUSY and has no interruption notice (``Instance.is_schedulable``). Starting instances
(QUEUED/REQUESTED/ALLOCATED) do not count: they may never register, and draining a warm agent
for one that fails to boot would leave the pool short. DRAINING, LOST and TERMINATING agents
are on their way out and do not count either. The reaper never drains when that would leave
fewer staying agents than ``min_instances``, and takes a drained-for-idleness agent back when
the staying count has fallen below it (a BUSY agent was lost meanwhile).

How long an agent may idle: ``max_idle_agent_period``, except that an on-demand agent of a
spot pool (fallback capacity) goes once idle as long as it took to boot, when the pool's
``reap_fallback_early`` is on (``idle_limit_s``).

Which idle agent goes first: fallback agents before spot ones, then the longest idle. So
on-demand capacity of a spot pool goes back to spot as soon as spot is there again: with
both idle, the fallback agent is the one drained to make room, to bring the pool under
max_instances, or when only one may go above min_instances. The reaper never moves running
work; consolidation (``corral.domain.consolidation``, opt-in per pool) does, and an agent it
is emptying (``consolidated_at``) is treated like one under an interruption notice: never
taken back, terminated once its trials have left.

The warm pool (``warm_pool.size`` per pool): an agent confirmed empty is *stopped* (DRAINING
-> STOPPING) instead of terminated while the pool keeps fewer stopped instances than that, so
the next demand starts it again in tens of seconds instead of launching one for minutes. Not
kept: agents drained for an interruption notice (the cloud takes them) and on-demand fallback
agents of a spot pool (the most expensive kind; the pool wants spot back). Stopped instances
past ``max_stopped_period``, or beyond the size (it was lowered), are terminated, oldest first.
Not kept either, and terminated when stopped: an instance the pool's monthly budget could
not start again this month (``cost.could_start_this_month``): nothing would, and its disk
would only spend more of a budget that is over.

Never touched: BUSY agents, agents with allocations, agents whose latest heartbeat reports
trials, and agents in ``reserved`` (capacity the planner counted for pending demand, e.g. one
member of a gang). ``heartbeats`` is keyed by instance record id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from corral.domain.cost import could_start_this_month
from corral.domain.fallback import is_fallback
from corral.domain.instance import Instance, InstanceState
from corral.domain.policy import PoolPolicy
from corral.domain.records import Heartbeat

IS = InstanceState


@dataclass(frozen=True, slots=True)
class ReapDecision:
    """Move ``instance`` to ``target``; ``reason`` goes to the event log and history."""

    instance: Instance
    target: InstanceState
    reason: str

    def apply(self, now: float) -> Instance:
        """The record to write (conditionally on ``instance.version``)."""
        return self.instance.transition(self.target, now, self.reason)


@dataclass(frozen=True, slots=True)
class ReapPlan:
    drain: tuple[ReapDecision, ...] = ()  # IDLE -> DRAINING
    # DRAINING -> TERMINATING or STOPPING, STOPPED -> TERMINATING (then the cloud call)
    terminate: tuple[ReapDecision, ...] = ()
    undrain: tuple[ReapDecision, ...] = ()  # DRAINING -> IDLE
    # Drained agents already confirmed empty by a fresh heartbeat: terminated in the same
    # pass once their drain is written (the conditional write is what rules out a racing
    # assignment), so an idle agent costs at most its idle period and one timer period.
    terminate_after_drain: frozenset[str] = frozenset()
    # ... of which these are stopped into the warm pool instead of terminated.
    park_after_drain: frozenset[str] = frozenset()

    @property
    def decisions(self) -> tuple[ReapDecision, ...]:
        return (*self.drain, *self.terminate, *self.undrain)


def idle_since(instance: Instance) -> float | None:
    """When the agent last became idle: the field, else its history, else registration."""
    if instance.idle_since is not None:
        return instance.idle_since
    entered = instance.entered_at(IS.IDLE)
    return entered if entered is not None else instance.registered_at


def idle_limit_s(pool: PoolPolicy, instance: Instance) -> float:
    """How long this agent may stay idle before it is drained: ``max_idle_agent_period``,
    or, for an on-demand agent of a pool that prefers spot (fallback capacity) when
    ``reap_fallback_early`` is on, the time it took to boot, if shorter.

    Why the boot time: an idle agent kept that long has cost what starting a new one costs
    (the ski-rental break-even), and fallback capacity is the most expensive kind; new
    demand is better served by spot, which the planner tries first. Spot agents stay warm
    for the whole period: they are what lets the next trial start without waiting.
    """
    limit = pool.max_idle_s
    if instance.offering.is_spot or not pool.reap_fallback_early:
        return limit
    if not any(o.is_spot for o in pool.offerings()):
        return limit  # an on-demand pool: nothing to fall back from
    boot = _boot_s(instance)
    return limit if boot is None else min(limit, boot)


def _boot_s(instance: Instance) -> float | None:
    start = instance.launched_at or instance.requested_at
    if start is None or instance.registered_at is None:
        return None
    return max(instance.registered_at - start, 0.0)


def drain_deadline(pool: PoolPolicy, instance: Instance) -> float | None:
    """When an IDLE agent first becomes a candidate for draining (None: idle time unknown).
    Timer-driven callers (the simulator) use it to skip passes that cannot drain anything."""
    since = idle_since(instance)
    return None if since is None else since + idle_limit_s(pool, instance)


def has_work(instance: Instance, heartbeat: Heartbeat | None) -> bool:
    """Trials on the record, or trials the agent itself still reports (a container that is
    stopping or checkpointing holds its GPUs even after the record let go of it)."""
    return bool(instance.allocations) or (heartbeat is not None and bool(heartbeat.trials))


def plan_reaping(
    pool: PoolPolicy,
    instances: Sequence[Instance],
    now: float,
    *,
    reserved: frozenset[str] = frozenset(),
    heartbeats: Mapping[str, Heartbeat] | None = None,
    room_needed: int = 0,
    fresh_after: float | None = None,
    month_to_date_usd: float | None = None,
) -> ReapPlan:
    """Plan one reaping pass over the records of ``pool`` (others are ignored).

    ``room_needed``: instances the waiting demand is short of under ``max_instances``; that
    many idle agents the plan does not count on are drained now, idle time aside (agents of
    a shape no waiting trial can use would hold the room until their idle period ends).
    ``fresh_after``: a heartbeat taken after this confirms an agent empty in this very pass.
    ``month_to_date_usd``: the pool's spend this month (None: not known), for the warm
    pool's budget rule (see the module docstring).
    """
    beats = heartbeats or {}
    mine = sorted((i for i in instances if i.pool == pool.name), key=lambda i: i.id)
    floor = pool.min_instances
    staying = sum(1 for i in mine if i.is_schedulable)

    drain: list[ReapDecision] = []

    def keep_warm(inst: Instance) -> bool:
        return month_to_date_usd is None or could_start_this_month(
            pool, inst.offering, month_to_date_usd
        )

    terminate: list[ReapDecision] = list(_expire_parked(pool, mine, now, keep_warm))
    undrain: list[ReapDecision] = []
    parked = sum(1 for i in mine if i.is_parked) - len(terminate)
    warm_room = pool.warm_pool_size - parked

    # Drained agents first: taking one back raises the staying count the drains below use.
    for inst in (i for i in mine if i.state is IS.DRAINING):
        decision = _settle_draining(inst, beats.get(inst.id), reserved, staying < floor)
        if decision is None:
            continue
        if decision.target is IS.IDLE:
            undrain.append(decision)
            staying += 1
            continue
        if warm_room > 0 and may_park(pool, inst) and keep_warm(inst):
            warm_room -= 1
            reason = f"{decision.reason}: stopped into the warm pool"
            decision = ReapDecision(inst, IS.STOPPING, reason)
        terminate.append(decision)

    candidates = [
        i
        for i in mine
        if i.state is IS.IDLE and i.id not in reserved and not has_work(i, beats.get(i.id))
    ]
    # Fallback (on-demand) agents first, then the longest idle; an agent with no known idle
    # time counts as idle since now.
    candidates.sort(key=lambda i: (not is_fallback(pool, i.offering), _idle_from(i, now), i.id))

    # An interruption notice: the agent goes away anyway; stop giving it work now.
    for inst in (i for i in candidates if not i.is_schedulable):
        drain.append(ReapDecision(inst, IS.DRAINING, "interruption notice: taking no new work"))
    schedulable = [i for i in candidates if i.is_schedulable]
    # Room in the warm pool, handed out as agents are drained: those that get it are stopped
    # instead of terminated once confirmed empty (this pass or a later one).
    parking: set[str] = set()

    def drain_one(inst: Instance, reason: str) -> None:
        nonlocal warm_room
        drain.append(ReapDecision(inst, IS.DRAINING, reason))
        if warm_room > 0 and may_park(pool, inst) and keep_warm(inst):
            warm_room -= 1
            parking.add(inst.id)

    # max_instances lowered below the live count: drain the surplus now, idle time aside.
    ceiling = max(pool.max_instances, floor)
    while staying > ceiling and schedulable:
        inst = schedulable.pop(0)
        drain_one(inst, f"{staying} agents stay, above max_instances {pool.max_instances}")
        staying -= 1

    # The waiting demand has no room under max_instances: make it from idle agents the
    # plan does not count on (``candidates`` excludes reserved ones), longest idle first.
    while room_needed > 0 and schedulable and staying > floor:
        inst = schedulable.pop(0)
        drain_one(
            inst,
            f"idle, making room for pending demand (pool at max_instances {pool.max_instances})",
        )
        staying -= 1
        room_needed -= 1

    for inst in schedulable:
        idle_for = now - _idle_from(inst, now)
        if staying <= floor:
            break
        limit = idle_limit_s(pool, inst)
        if idle_for <= limit:
            continue
        if limit < pool.max_idle_s:
            reason = (
                f"on-demand fallback idle for {idle_for:.0f}s, past its boot time ({limit:.0f}s)"
            )
        else:
            reason = (
                f"idle for {idle_for:.0f}s, past max_idle_agent_period ({pool.max_idle_s:.0f}s)"
            )
        drain_one(inst, reason)
        staying -= 1

    confirmed = frozenset(
        d.instance.id for d in drain if _freshly_empty(beats.get(d.instance.id), fresh_after)
    )
    park = frozenset(parking & confirmed)
    return ReapPlan(tuple(drain), tuple(terminate), tuple(undrain), confirmed, park)


def may_park(pool: PoolPolicy, instance: Instance) -> bool:
    """Whether an empty agent may go to the warm pool (given room): launched stoppable (an
    instance from before the pool had a warm pool may not be), not one the cloud is taking
    (an interruption notice), not on-demand fallback capacity of a spot pool."""
    return (
        pool.warm_pool_size > 0
        and instance.stoppable
        and instance.cloud_id is not None
        and instance.interruption_notice_at is None
        and not is_fallback(pool, instance.offering)
    )


def _expire_parked(
    pool: PoolPolicy, mine: Sequence[Instance], now: float, keep: Callable[[Instance], bool]
) -> list[ReapDecision]:
    """Stopped instances to terminate: those the budget could not start again (``keep``
    says no), those past max_stopped_period, then, oldest first, those beyond the warm
    pool's size (it was lowered). A STOPPING one is left to settle first."""
    stopped = sorted(
        (i for i in mine if i.state is IS.STOPPED),
        key=lambda i: (i.stopped_at if i.stopped_at is not None else now, i.id),
    )
    excess = sum(1 for i in mine if i.is_parked) - pool.warm_pool_size
    out: list[ReapDecision] = []
    for inst in stopped:
        kept_for = now - (inst.stopped_at if inst.stopped_at is not None else now)
        if not keep(inst):
            reason = "the pool's monthly budget could not start it again this month"
        elif kept_for > pool.max_stopped_s:
            reason = f"stopped for {kept_for:.0f}s, past max_stopped_period"
        elif excess > 0:
            reason = f"the warm pool keeps {pool.warm_pool_size} stopped instance(s)"
        else:
            continue
        out.append(ReapDecision(inst, IS.TERMINATING, reason))
        excess -= 1
    return out


def _freshly_empty(heartbeat: Heartbeat | None, fresh_after: float | None) -> bool:
    return (
        fresh_after is not None
        and heartbeat is not None
        and heartbeat.at > fresh_after
        and not heartbeat.trials
    )


def _idle_from(instance: Instance, now: float) -> float:
    since = idle_since(instance)
    return now if since is None else since


def _settle_draining(
    inst: Instance, heartbeat: Heartbeat | None, reserved: frozenset[str], below_min: bool
) -> ReapDecision | None:
    """Terminate, take back, or (None) keep waiting for one DRAINING agent. One drained
    for an interruption notice or by consolidation (its trials are on their way to other
    agents) is never taken back: it waits for its trials to leave, then goes."""
    for_idleness = inst.drained_for_idleness
    if for_idleness and inst.allocations:
        return ReapDecision(inst, IS.IDLE, "work was assigned while draining")
    if for_idleness and inst.id in reserved:
        return ReapDecision(inst, IS.IDLE, "taken back for pending demand")
    if has_work(inst, heartbeat) or inst.id in reserved:
        # Still running something (or the planner counts on it): not confirmed empty yet.
        return None
    if for_idleness and below_min:
        return ReapDecision(inst, IS.IDLE, "taken back to keep min_instances")
    why = "interrupted" if inst.interruption_notice_at is not None else "drained"
    return ReapDecision(inst, IS.TERMINATING, f"{why} and confirmed empty")
