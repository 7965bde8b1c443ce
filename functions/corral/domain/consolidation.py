"""Consolidation: empty an under-used agent by moving its checkpointed trials onto free GPUs
of the pool's other busy agents, so the reaper can terminate it.

Why: when trials of different lengths share instances, the short ones end and leave long
ones scattered over many partly used instances; every one of them is paid in full until its
last trial ends (the simulator's "fragmented" idle GPU-hours, most of the idle time on every
workload measured; docs/benchmarks.md). Placement cannot prevent it without knowing how long
trials run; moving work afterwards can.

How a move happens: the agent is drained (it takes no new work) and its trials are requeued
with it still running them, exactly as for a spot interruption notice: its next heartbeat
tells it to stop them, which means SIGTERM, "checkpoint now and exit" (docs/agent.md), and
once it reports them stopped they are placed on the free GPUs found here and resume from
that checkpoint. The drained agent is then empty and the reaper terminates it; it is marked
(``Instance.consolidated_at``) so that neither the reaper nor the schedule pass takes it
back for waiting work, which would put the trials straight back on it.

When (all of it, per pool, opt-in with the pool's ``consolidate``; on-demand fallback
agents of a spot pool also without it, unless the pool turns ``move_fallback_to_spot`` off:
the user asked for spot, and an on-demand agent bought during a spot outage would otherwise
bill about three times the spot price for as long as its longest trial runs, days on the
shipped trace):

- the pool keeps ``min_instances`` agents without the emptied one, and nothing of it waits:
  free GPUs belong to waiting work first, and a move already in progress (its trials are
  PREEMPTED, i.e. waiting) finishes before the next one starts;
- every trial on the agent runs on this one agent (gang members are never moved), has
  reported a checkpoint (so it is checkpointable and resumes from one), and has been running
  here at least ``MIN_RUN_S`` (a trial that was just placed or moved stays put);
- all of them fit, best fit, on the free GPUs of other busy agents of the pool that are not
  on-demand fallback capacity (an on-demand agent of a spot pool, itself the first to go);
  a fallback agent's trials may also go to *idle* spot agents: that is on-demand capacity
  going back to spot as soon as spot is there. When no spot agent has room for them but a
  spot launch of the pool has succeeded since the fallback agent was bought (spot capacity
  is back) and no other fallback agent has free GPUs (they would take the trials straight
  back), a fallback agent's trials are moved anyway: requeued, they wait for spot
  capacity the planner buys for them as for any waiting trial (on-demand again only after
  ``on_demand_fallback_after``), a boot's wait against paying three times the spot price for
  as long as they have run so far;
- it leaves at least ``SPARE_FRACTION`` of the emptied agent's GPUs free on the pool's other
  agents, for the next arrivals.

Why that pays: a trial that has run 10 minutes is, for heavy-tailed run times and without
knowing its duration, expected to run about as long again; the move costs it about
2 minutes of its GPUs (SIGTERM and checkpoint, a container start, loading a multi-GB
checkpoint from object storage), while the emptied agent stops billing all of its
GPUs for that time: a fifth of the saving at most. The simulator charges every resume that
restart time (``simulation.restart_overhead``) and counts it apart.

One agent per pool per pass: the next pass sees the result of this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from corral.domain.fallback import is_fallback
from corral.domain.instance import Instance, InstanceState
from corral.domain.packing import BinIndex
from corral.domain.placement import agent_bin
from corral.domain.policy import PoolPolicy
from corral.domain.trial import Trial, TrialState

# A trial runs this long in one place before it may be moved (no bouncing, and young trials
# are the likeliest to end soon anyway).
MIN_RUN_S = 600.0
# Free GPUs the pool keeps on its other agents after a move, as a fraction of the emptied
# agent's: without them the next arrivals wait for a boot (chosen on simulator seeds 100-101:
# 0 cut the most cost but raised the p95 wait above the Determined model's; 1 kept the wait and
# gave up half the saving; docs/benchmarks.md reports other seeds).
SPARE_FRACTION = 0.5


@dataclass(frozen=True, slots=True)
class ConsolidationMove:
    """Drain ``source`` and move ``trials`` off it (to the free GPUs ``targets`` name)."""

    source: Instance
    trials: tuple[Trial, ...]
    targets: tuple[str, ...]
    reason: str


def plan_consolidation(
    pool: PoolPolicy,
    instances: Sequence[Instance],
    running: Mapping[str, Trial],
    now: float,
    *,
    waiting: bool,
) -> ConsolidationMove | None:
    """The one move worth making in ``pool`` now, if any. ``running``: RUNNING trials by id
    (others may be missing); ``waiting``: whether any trial of the pool waits."""
    if waiting or not (pool.consolidate or pool.move_fallback_to_spot):
        return None
    pool_live = [i for i in instances if i.pool == pool.name and i.holds_capacity]
    mine = [i for i in pool_live if i.is_schedulable]
    if len(mine) <= pool.min_instances:
        return None  # the emptied agent would go, leaving the pool below min_instances
    fallback = frozenset(i.id for i in mine if is_fallback(pool, i.offering))
    sources = [
        i
        for i in mine
        if i.state is InstanceState.BUSY
        and (
            (i.id in fallback and pool.move_fallback_to_spot)
            or (pool.consolidate and i.free_slots > 0)
        )
    ]
    # Fallback capacity first (it costs about three times spot), then the emptiest agent.
    sources.sort(
        key=lambda i: (i.id not in fallback, len(i.used_gpus), -i.offering.hourly_price, i.id)
    )
    for source in sources:
        trials = _movable(source, running, now)
        if trials is None:
            continue
        targets = _fit(source, trials, mine, fallback)
        if targets is None:
            back = _back_to_spot(pool, source, pool_live, mine, fallback)
            if back is not None:
                reason = (
                    f"on-demand fallback, and spot is back ({back.id} launched since): "
                    f"moving its trials to spot"
                )
                return ConsolidationMove(source, trials, (), reason)
            continue
        if not _onto_idle_spot(source, targets, mine, fallback) and (
            _spare_after(source, trials, mine, fallback) < SPARE_FRACTION * source.slots
        ):
            continue  # the next arrivals would wait for a boot: keep the slack
        moved_gpus = sum(t.slots for t in trials)
        onto = ", ".join(sorted(set(targets)))
        reason = (
            f"on-demand fallback: moving its trials to spot ({onto})"
            if source.id in fallback
            else f"consolidating: {moved_gpus} of {source.slots} GPUs in use, its trials fit "
            f"on {onto}"
        )
        return ConsolidationMove(source, trials, targets, reason)
    return None


def _back_to_spot(
    pool: PoolPolicy,
    source: Instance,
    pool_live: Sequence[Instance],
    agents: Sequence[Instance],
    fallback: frozenset[str],
) -> Instance | None:
    """For a fallback ``source`` whose trials fit nowhere now: a spot instance of the pool
    that the cloud launched after it (proof that spot capacity is there again), unless
    another fallback agent has free GPUs (it would take the trials straight back)."""
    if not pool.move_fallback_to_spot or source.id not in fallback or source.launched_at is None:
        return None
    if any(a.id != source.id and a.free_slots > 0 and a.id in fallback for a in agents):
        return None
    newer = [
        i
        for i in pool_live
        if i.offering.is_spot and i.launched_at is not None and i.launched_at > source.launched_at
    ]
    return min(newer, key=lambda i: (i.launched_at or 0.0, i.id), default=None)


def _onto_idle_spot(
    source: Instance, targets: Sequence[str], agents: Sequence[Instance], fallback: frozenset[str]
) -> bool:
    """Whether fallback ``source``'s trials all go to idle spot agents: no spare rule then.
    Idle capacity is the reaper's to let go, not slack to keep; a fallback agent kept for
    want of it costs three times spot. (Onto busy spot agents' free GPUs the rule holds:
    using up the slack there made the next arrivals wait and buy on-demand again, 0.8 % ->
    7.7 % of the GPU-hours on a bursty Helios-like run.)"""
    idle = {a.id for a in agents if a.state is InstanceState.IDLE}
    return source.id in fallback and set(targets) <= idle


def _spare_after(
    source: Instance, trials: Sequence[Trial], agents: Sequence[Instance], fallback: frozenset[str]
) -> int:
    """Free GPUs left on the pool's other agents once ``trials`` moved onto them (fallback
    agents' GPUs do not count: they are the first to go)."""
    free = sum(a.free_slots for a in agents if a.id != source.id and a.id not in fallback)
    return free - sum(t.slots for t in trials)


def _run_start(trial: Trial, now: float) -> float:
    started = trial.entered_at(TrialState.RUNNING)
    return now if started is None else started


def _movable(
    source: Instance, running: Mapping[str, Trial], now: float
) -> tuple[Trial, ...] | None:
    """The agent's trials when every one of them may be moved, else None."""
    trials: list[Trial] = []
    for trial_id in source.trial_ids:
        trial = running.get(trial_id)
        if trial is None or trial.state is not TrialState.RUNNING or trial.placement is None:
            return None  # starting, stopping, or not known to run: leave the agent alone
        if len(trial.placement.parts) != 1 or trial.latest_checkpoint is None:
            return None
        if now - _run_start(trial, now) < MIN_RUN_S:
            return None
        trials.append(trial)
    return tuple(trials) if trials else None


def _fit(
    source: Instance, trials: Sequence[Trial], agents: Sequence[Instance], fallback: frozenset[str]
) -> tuple[str, ...] | None:
    """Where ``trials`` (largest first) land on the other agents' free GPUs, packed as the
    scheduler packs them (``BinIndex``: best fit, expensive GPUs last); the agent of each,
    or None when one does not fit on a single agent. Never on fallback agents (the capacity
    that should go first); idle agents only for a fallback source (back to spot)."""
    from_fallback = source.id in fallback
    index = BinIndex.of(
        agent_bin(a)
        for a in sorted(agents, key=lambda a: a.id)
        if a.id != source.id
        and a.id not in fallback
        and a.free_slots > 0
        # Idle agents only for a fallback source: not fallback themselves, so they are spot.
        and (a.state is InstanceState.BUSY or from_fallback)
    )
    targets: list[str] = []
    for trial in sorted(trials, key=lambda t: (-t.slots, t.id)):
        parts = index.place(trial.slots)
        if parts is None or len(parts) != 1:
            return None
        targets.append(parts[0][0])
    return tuple(targets)
