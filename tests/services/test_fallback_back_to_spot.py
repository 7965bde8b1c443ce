"""On-demand capacity of a spot pool goes back to spot by default: the reaper moves the
checkpointed trial of a busy fallback agent once spot launches again, the trial resumes on
spot from its checkpoint, and the on-demand agent is terminated. No ``consolidate`` needed."""

from __future__ import annotations

from corral.domain.consolidation import MIN_RUN_S
from corral.domain.instance import InstanceState
from corral.domain.offerings import CapacityType, Offering
from corral.domain.trial import TrialState
from corral.services.idle_reap import run_idle_reap

from .harness import SPOT_4, Cluster, Script, make_pool
from .test_consolidation import report_checkpoint

IS = InstanceState
OD_4 = Offering("g.4", "zone-a", CapacityType.ON_DEMAND, 4, 4.5)


def fallback_running(**settings: object) -> tuple[Cluster, str, str]:
    """A trial that fell back to on-demand while spot was out, checkpointed and long
    running; then spot is back and a second trial gets a (newer) spot agent of its own.
    Returns the cluster, the fallback trial and the fallback agent's record id."""
    pool = make_pool(SPOT_4, OD_4, max_idle_s=3600.0, fallback_after_s=0.0, **settings)
    cluster = Cluster(pool)
    cluster.cloud.set_unavailable(SPOT_4.key)
    first = cluster.submit_scripted(Script(duration_s=100_000), resources={"slots_per_trial": 1})
    cluster.run(120)
    (on_demand,) = [i for i in cluster.instances() if i.state is IS.BUSY]
    assert not on_demand.offering.is_spot
    report_checkpoint(cluster, first)
    cluster.run(MIN_RUN_S + 60)

    cluster.cloud.set_unavailable(SPOT_4.key, False)
    cluster.submit_scripted(Script(duration_s=100_000), resources={"slots_per_trial": 4})
    cluster.run(120)
    spot = [i for i in cluster.instances() if i.state is IS.BUSY and i.offering.is_spot]
    assert len(spot) == 1 and spot[0].free_slots == 0
    return cluster, first, on_demand.id


def test_a_busy_fallback_agent_goes_back_to_spot_and_is_terminated() -> None:
    cluster, moved, on_demand = fallback_running()

    report = run_idle_reap(cluster.ctx)
    assert report.consolidated == [on_demand]
    assert cluster.trial(moved).state is TrialState.PREEMPTED

    cluster.run(240)  # the agent stops it; the planner buys spot for it; it resumes there
    resumed = cluster.trial(moved)
    assert resumed.state is TrialState.RUNNING
    (target,) = resumed.placement.instance_ids
    assert cluster.store.get_instance(target).offering.is_spot  # type: ignore[union-attr]
    assert resumed.latest_checkpoint == f"s3://b/{moved}/1"

    run_idle_reap(cluster.ctx)
    gone = cluster.store.get_instance(on_demand)
    assert gone is not None and gone.state in (IS.TERMINATING, IS.TERMINATED)


def test_turned_off_the_fallback_agent_keeps_its_trial() -> None:
    cluster, moved, on_demand = fallback_running(move_fallback_to_spot=False)
    assert run_idle_reap(cluster.ctx).consolidated == []
    assert cluster.trial(moved).state is TrialState.RUNNING
    assert cluster.store.get_instance(on_demand).state is IS.BUSY  # type: ignore[union-attr]
