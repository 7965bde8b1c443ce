"""The warm pool through the services on memory adapters and the simulated cloud: an idle
agent is stopped instead of terminated, and the next trial starts it again instead of
launching a new instance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from corral.adapters.memory import SimulatedCloud, SimulatedCloudConfig
from corral.api import views
from corral.domain import reconcile_decisions as rd
from corral.domain.cost import instance_cost_usd
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.instance import Instance, InstanceState
from corral.domain.offerings import CapacityType, Offering
from corral.domain.records import EventKind
from corral.domain.trial import TrialState
from corral.ports.cloud import CloudState, LaunchRequest, LaunchResult
from corral.ports.queue import QueueName
from corral.services.idle_reap import run_idle_reap
from corral.services.kill import kill_experiment
from corral.services.reconcile import _apply as apply_decision
from corral.services.reconcile import run_reconcile
from corral.services.scale_up import LaunchOutcome, launch_instance
from corral.services.schedule_pass import run_schedule_pass
from corral.services.shared.spend import pool_month_to_date
from corral.services.warm_start import start_warm

from .harness import OD_1, Cluster, Script, make_pool

IS = InstanceState
OD_1B = Offering("g.1", "zone-b", CapacityType.ON_DEMAND, 1, 1.0)
OD_4 = Offering("g.4", "zone-a", CapacityType.ON_DEMAND, 4, 4.0)


class RecordingCloud:
    """The real simulated cloud, recording launch requests; ``confirm_stops=False`` plays
    a stop call whose answer was lost (the cloud may or may not have acted on it)."""

    def __init__(self, cloud: SimulatedCloud, *, confirm_stops: bool = True, act: bool = True):
        self._cloud = cloud
        self.launches: list[LaunchRequest] = []
        self.starts: list[str] = []
        self._confirm = confirm_stops
        self._act = act

    def __getattr__(self, name: str) -> object:
        return getattr(self._cloud, name)

    def launch(self, request: LaunchRequest) -> LaunchResult:
        self.launches.append(request)
        return self._cloud.launch(request)

    def start(self, cloud_id: str, token: str) -> LaunchResult:
        self.starts.append(cloud_id)
        return self._cloud.start(cloud_id, token)

    def stop(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        done = self._cloud.stop(cloud_ids) if self._act else frozenset()
        return done if self._confirm else frozenset()


def cluster_with(
    *offerings: Offering, cloud: SimulatedCloudConfig | None = None, **pool: object
) -> Cluster:
    settings = {"warm_pool_size": 1, **pool}
    return Cluster(make_pool(*(offerings or (OD_1,)), **settings), cloud=cloud)


def past_max_idle(cluster: Cluster) -> float:
    """Seconds that take an agent idle since now past its pool's max_idle_agent_period."""
    (pool,) = cluster.ctx.pools.values()
    return pool.max_idle_s + 10


def record_of(cluster: Cluster, record_id: str) -> Instance:
    record = cluster.store.get_instance(record_id)
    assert record is not None
    return record


def idle_agent(cluster: Cluster) -> Instance:
    """One short trial run to completion: its agent is IDLE."""
    trial_id = cluster.submit_scripted(Script(duration_s=20), name="first")
    cluster.pump()
    cluster.run(90)
    assert cluster.trial(trial_id).state is TrialState.COMPLETED
    (record,) = cluster.instances()
    assert record.state is IS.IDLE
    return record


def park_one(cluster: Cluster) -> Instance:
    """The idle agent idles past max_idle_agent_period and the reaper stops it into the warm
    pool."""
    record = idle_agent(cluster)
    cluster.run(past_max_idle(cluster))
    report = run_idle_reap(cluster.ctx)
    assert report.stopped == [record.id] and report.terminated == []
    return record_of(cluster, record.id)


def submit_second(cluster: Cluster, duration_s: float = 600.0) -> str:
    return cluster.submit_scripted(Script(duration_s=duration_s), name="second")


def agent_restarts(cluster: Cluster, cloud_id: str) -> None:
    """The instance booted again: a new agent process registers (the harness only
    registers instances it has not seen)."""
    cluster.agents.pop(cloud_id, None)


def events(cluster: Cluster, kind: EventKind, record_id: str | None = None) -> list[str]:
    return [
        e.message
        for e in cluster.store.events(limit=10_000)
        if e.kind is kind and (record_id is None or e.instance_id == record_id)
    ]


# ---- parking --------------------------------------------------------------------------------


def test_the_reaper_stops_an_idle_agent_into_the_warm_pool() -> None:
    cluster = cluster_with()
    parked = park_one(cluster)
    assert parked.state is IS.STOPPED
    assert parked.stopped_at is not None
    assert cluster.cloud.get(parked.cloud_id or "").state is CloudState.STOPPED  # type: ignore[union-attr]
    assert cluster.running_cloud_ids() == [parked.cloud_id]  # stopped, not gone
    assert len(events(cluster, EventKind.INSTANCE_STOPPED, parked.id)) == 1
    assert events(cluster, EventKind.INSTANCE_TERMINATED, parked.id) == []


DISK = 0.05  # USD an hour: one instance's disks


def disks_usd(record: Instance, now: float) -> float:
    assert record.disk_since is not None
    end = record.terminated_at if record.terminated_at is not None else now
    return (end - record.disk_since) / 3600.0 * DISK


def test_parking_closes_the_runs_compute_once_and_its_disks_bill_on() -> None:
    cluster = cluster_with(disk_hourly_usd=DISK)
    parked = park_one(cluster)
    assert parked.launched_at is not None and parked.stopped_at is not None
    assert parked.disk_since == parked.launched_at
    run_usd = (parked.stopped_at - parked.launched_at) / 3600.0 * OD_1.hourly_price
    state = cluster.store.pool_state("gpu")
    assert state.closed_spend_usd == pytest.approx(run_usd)  # the compute only
    assert parked.closed_usd == pytest.approx(run_usd)  # the record remembers its runs
    # Stopped, only its disks add up, however long it stays.
    cluster.clock.advance(5000)
    now = cluster.clock.now()
    record = record_of(cluster, parked.id)
    expected = run_usd + disks_usd(record, now)
    assert instance_cost_usd(record, now, DISK) == pytest.approx(expected)
    assert pool_month_to_date(state, cluster.instances(), now, DISK) == pytest.approx(expected)
    # What `corral agent list` and `corral pool list` show.
    (shown,) = views.list_instances(cluster.ctx).instances
    assert shown.state == "STOPPED" and shown.cost_usd == pytest.approx(expected)
    (pool,) = views.list_pools(cluster.ctx).pools
    assert pool.budget.spent_usd == pytest.approx(expected)
    assert pool.budget.hourly_burn_usd == pytest.approx(DISK)
    # Later passes close nothing more.
    run_reconcile(cluster.ctx)
    run_idle_reap(cluster.ctx)
    assert cluster.store.pool_state("gpu").closed_spend_usd == pytest.approx(run_usd)


def second_life(cluster: Cluster, parked: Instance, gap_s: float) -> Instance:
    """``gap_s`` after it was stopped, a 20 s trial starts the parked instance again; it
    runs it, idles past max_idle_agent_period and is stopped again."""
    cluster.clock.advance(gap_s)
    submit_second(cluster, duration_s=20)
    cluster.pump()
    agent_restarts(cluster, parked.cloud_id or "")
    cluster.run(90)  # registers, runs the 20 s trial, idles
    cluster.run(past_max_idle(cluster))
    assert run_idle_reap(cluster.ctx).stopped == [parked.id]
    again = record_of(cluster, parked.id)
    assert again.state is IS.STOPPED
    return again


def assert_both_runs_closed(cluster: Cluster, first_usd: float, again: Instance) -> None:
    assert again.launched_at is not None and again.stopped_at is not None
    second_usd = (again.stopped_at - again.launched_at) / 3600.0 * OD_1.hourly_price
    assert second_usd > 0
    state = cluster.store.pool_state("gpu")
    assert state.closed_spend_usd == pytest.approx(first_usd + second_usd)
    assert again.closed_usd == pytest.approx(first_usd + second_usd)
    now = cluster.clock.now()
    # The disks since the first launch, once: a warm start does not start them again.
    assert again.disk_since is not None and again.disk_since < again.launched_at
    total = pool_month_to_date(state, cluster.instances(), now, DISK)
    assert total == pytest.approx(first_usd + second_usd + disks_usd(again, now))


def test_a_second_stop_closes_the_second_run() -> None:
    cluster = cluster_with(disk_hourly_usd=DISK)
    parked = park_one(cluster)
    first_usd = cluster.store.pool_state("gpu").closed_spend_usd
    assert_both_runs_closed(cluster, first_usd, second_life(cluster, parked, 600.0))


def test_a_run_started_in_the_same_second_as_the_stop_is_still_billed() -> None:
    # Demand arriving in the very pass that parked the agent (the simulator's grid, a fast
    # API): its launch time equals the stop time, and the run must not be taken for the
    # parked one.
    cluster = cluster_with(disk_hourly_usd=DISK)
    parked = park_one(cluster)
    first_usd = cluster.store.pool_state("gpu").closed_spend_usd
    assert_both_runs_closed(cluster, first_usd, second_life(cluster, parked, 0.0))


def test_without_a_warm_pool_the_idle_agent_is_terminated() -> None:
    cluster = cluster_with(warm_pool_size=0)
    record = idle_agent(cluster)
    cluster.run(320)
    report = run_idle_reap(cluster.ctx)
    assert report.terminated == [record.id] and report.stopped == []
    assert record_of(cluster, record.id).state is IS.TERMINATED


def spend_the_budget(cluster: Cluster) -> None:
    """The operator lowers the pool's monthly budget to what it has spent so far plus less
    than one hour of its cheapest instance: nothing can start again this month."""
    pool = cluster.ctx.pools["gpu"]
    spent = pool_month_to_date(
        cluster.store.pool_state("gpu"), cluster.instances(), cluster.clock.now(), DISK
    )
    cluster.ctx.pools["gpu"] = replace(pool, monthly_budget_usd=spent + 0.5)


def test_a_pool_whose_budget_is_spent_terminates_its_idle_agent_instead_of_stopping_it() -> None:
    cluster = cluster_with(disk_hourly_usd=DISK, monthly_budget_usd=100.0)
    record = idle_agent(cluster)
    cluster.run(past_max_idle(cluster))
    spend_the_budget(cluster)
    report = run_idle_reap(cluster.ctx)
    assert report.terminated == [record.id] and report.stopped == []
    assert record_of(cluster, record.id).state is IS.TERMINATED
    assert cluster.running_cloud_ids() == []


def test_a_pool_whose_budget_is_spent_terminates_its_stopped_instances() -> None:
    cluster = cluster_with(disk_hourly_usd=DISK, monthly_budget_usd=100.0)
    parked = park_one(cluster)
    cluster.clock.advance(60)
    assert run_idle_reap(cluster.ctx).terminated == []  # kept while the budget can start it
    spend_the_budget(cluster)
    report = run_idle_reap(cluster.ctx)
    assert report.terminated == [parked.id]
    assert record_of(cluster, parked.id).state is IS.TERMINATED
    assert cluster.running_cloud_ids() == []
    terminated = events(cluster, EventKind.INSTANCE_TERMINATED)
    assert any("could not start it again" in m for m in terminated)


def test_an_expired_stopped_instance_is_terminated_and_only_its_disks_are_closed() -> None:
    cluster = cluster_with(max_stopped_s=3600.0, disk_hourly_usd=DISK)
    parked = park_one(cluster)
    closed = cluster.store.pool_state("gpu").closed_spend_usd
    cluster.clock.advance(3601)
    before = pool_month_to_date(
        cluster.store.pool_state("gpu"), cluster.instances(), cluster.clock.now(), DISK
    )
    report = run_idle_reap(cluster.ctx)
    gone = record_of(cluster, parked.id)
    assert report.terminated == [parked.id]
    assert gone.state is IS.TERMINATED
    assert cluster.running_cloud_ids() == []
    # Its run was closed at the stop; termination closes its disks, nothing twice.
    state = cluster.store.pool_state("gpu")
    now = cluster.clock.now()
    assert state.closed_spend_usd == pytest.approx(closed + disks_usd(gone, now))
    live = [i for i in cluster.instances() if i.state is not IS.TERMINATED]
    assert pool_month_to_date(state, live, now, DISK) == pytest.approx(before)


def test_an_unconfirmed_stop_stays_stopping_until_the_reconciler_sees_it_stopped() -> None:
    cluster = cluster_with()
    record = idle_agent(cluster)
    cluster.run(past_max_idle(cluster))
    lost_answer = RecordingCloud(cluster.cloud, confirm_stops=False)
    cluster.ctx = replace(cluster.ctx, cloud=lost_answer)  # type: ignore[arg-type]
    assert run_idle_reap(cluster.ctx).stopped == [record.id]
    assert record_of(cluster, record.id).state is IS.STOPPING
    run_reconcile(cluster.ctx)
    assert record_of(cluster, record.id).state is IS.STOPPED


def test_a_stop_that_never_happened_is_asked_again_by_the_reconciler() -> None:
    cluster = cluster_with()
    record = idle_agent(cluster)
    cluster.run(past_max_idle(cluster))
    ignored = RecordingCloud(cluster.cloud, confirm_stops=False, act=False)
    cluster.ctx = replace(cluster.ctx, cloud=ignored)  # type: ignore[arg-type]
    run_idle_reap(cluster.ctx)
    cloud_id = record.cloud_id or ""
    assert cluster.cloud.get(cloud_id).state is CloudState.RUNNING  # type: ignore[union-attr]
    cluster.ctx = replace(cluster.ctx, cloud=cluster.cloud)
    run_reconcile(cluster.ctx)  # still running: stop again
    assert cluster.cloud.get(cloud_id).state is CloudState.STOPPED  # type: ignore[union-attr]
    run_reconcile(cluster.ctx)  # now listed stopped
    assert record_of(cluster, record.id).state is IS.STOPPED


def test_a_stopped_instance_started_behind_corral_s_back_is_stopped_again() -> None:
    cluster = cluster_with()
    parked = park_one(cluster)
    cloud_id = parked.cloud_id or ""
    cluster.cloud.start(cloud_id, "someone-else")
    cluster.clock.advance(30)
    run_reconcile(cluster.ctx)
    assert cluster.cloud.get(cloud_id).state is CloudState.STOPPED  # type: ignore[union-attr]
    assert record_of(cluster, parked.id).state is IS.STOPPED
    assert len(events(cluster, EventKind.INSTANCE_STOPPED, parked.id)) == 2


# ---- a warm start ---------------------------------------------------------------------------


def test_a_new_trial_starts_the_stopped_instance_instead_of_launching() -> None:
    cluster = cluster_with()
    parked = park_one(cluster)
    cluster.run(600)
    trial_id = submit_second(cluster)
    cluster.pump()

    (record,) = cluster.instances()  # no new record
    assert record.id == parked.id and record.cloud_id == parked.cloud_id
    assert record.state is IS.ALLOCATED
    assert record.attempt == parked.attempt + 1
    assert record.planned_for == ((trial_id, 1),)
    assert record.launched_at == cluster.clock.now()  # billed from the start, not the launch
    assert cluster.cloud.api_calls["launch"] == 1 and cluster.cloud.api_calls["start"] == 1
    history = [h.state for h in record.history[-3:]]
    assert history == [IS.QUEUED.value, IS.REQUESTED.value, IS.ALLOCATED.value]

    agent_restarts(cluster, record.cloud_id or "")
    cluster.run(30)  # running after 15 s, registers, gets the trial
    placed = record_of(cluster, record.id)
    assert placed.state is IS.BUSY
    assert placed.registered_at is not None and placed.registered_at > parked.stopped_at  # type: ignore[operator]
    trial = cluster.trial(trial_id)
    assert trial.state is TrialState.RUNNING
    assert trial.placement is not None and trial.placement.instance_ids == (record.id,)


def test_a_warm_start_is_not_chosen_for_an_offering_refused_lately() -> None:
    cluster = cluster_with(OD_1, OD_1B)
    parked = park_one(cluster)
    assert parked.offering == OD_1
    now = cluster.clock.now()
    state = cluster.store.pool_state("gpu")
    refused = replace(state, capacity=state.capacity.marked_unavailable(OD_1.key, now, 600.0))
    cluster.store.commit([refused])
    trial_id = submit_second(cluster)
    cluster.pump()

    assert record_of(cluster, parked.id).state is IS.STOPPED  # left in the warm pool
    fresh = [r for r in cluster.instances() if r.id != parked.id]
    assert len(fresh) == 1 and fresh[0].offering == OD_1B
    assert fresh[0].planned_for == ((trial_id, 1),)
    assert cluster.cloud.api_calls["start"] == 0


def test_a_start_refused_for_capacity_goes_back_to_the_warm_pool_and_launches_elsewhere() -> None:
    cluster = cluster_with(OD_1, OD_1B)
    parked = park_one(cluster)
    cluster.cloud.set_unavailable(OD_1.key)
    trial_id = submit_second(cluster)
    cluster.pump()

    back = record_of(cluster, parked.id)
    assert back.state is IS.STOPPED and back.cloud_id == parked.cloud_id
    assert cluster.cloud.get(parked.cloud_id or "").state is CloudState.STOPPED  # type: ignore[union-attr]
    capacity = cluster.store.pool_state("gpu").capacity
    assert not capacity.is_available(OD_1.key, cluster.clock.now())
    assert events(cluster, EventKind.OFFERING_UNAVAILABLE, parked.id)
    # The scheduler was woken and its next pass launched a fresh instance elsewhere.
    fresh = [r for r in cluster.instances() if r.id != parked.id]
    assert len(fresh) == 1 and fresh[0].offering == OD_1B
    assert fresh[0].state is IS.ALLOCATED
    assert fresh[0].planned_for == ((trial_id, 1),)


def test_a_start_refused_while_still_stopping_is_sent_again() -> None:
    cluster = cluster_with(cloud=SimulatedCloudConfig(boot_s_mean=30.0, stop_s=60.0))
    parked = park_one(cluster)  # confirmed stopping: the record is STOPPED at once
    assert cluster.cloud.get(parked.cloud_id or "").state is CloudState.STOPPING  # type: ignore[union-attr]
    submit_second(cluster)
    cluster.pump()

    waiting = record_of(cluster, parked.id)
    assert waiting.state is IS.REQUESTED and waiting.cloud_id == parked.cloud_id
    assert LaunchOutcome.RETRYING.value in cluster.handled
    assert cluster.queue.pending(QueueName.SCALE_UP) == 1  # the retry, delayed
    cluster.run(60)
    started = record_of(cluster, parked.id)
    assert started.state in (IS.ALLOCATED, IS.IDLE, IS.BUSY)
    assert started.attempt == waiting.attempt  # the same attempt, retried
    assert len(cluster.instances()) == 1


def test_a_start_the_cloud_refuses_outright_gives_the_instance_up_and_launches_fresh() -> None:
    cluster = cluster_with()
    parked = park_one(cluster)
    cluster.cloud.terminate([parked.cloud_id or ""])  # gone behind Corral's back
    trial_id = submit_second(cluster)
    cluster.pump()

    given_up = record_of(cluster, parked.id)
    assert given_up.state in (IS.TERMINATING, IS.TERMINATED)
    assert given_up.state is IS.TERMINATED  # the terminate call confirmed it
    assert given_up.last_error
    fresh = [r for r in cluster.instances() if r.id != parked.id]
    assert len(fresh) == 1 and fresh[0].state is IS.ALLOCATED
    assert fresh[0].planned_for == ((trial_id, 1),)


def test_a_warm_start_no_longer_wanted_goes_back_to_the_warm_pool() -> None:
    cluster = cluster_with()
    parked = park_one(cluster)
    submitted = cluster.submit(entrypoint="python train.py", name="second")
    cluster.queue.drain(QueueName.SCHEDULE)
    run_schedule_pass(cluster.ctx)  # warm start planned, its launch message not yet handled
    queued = record_of(cluster, parked.id)
    assert queued.state is IS.QUEUED and queued.is_warm_start

    kill_experiment(cluster.ctx, submitted.experiment.id)
    cluster.queue.drain(QueueName.SCHEDULE)
    run_schedule_pass(cluster.ctx)
    back = record_of(cluster, parked.id)
    assert back.state is IS.STOPPED  # not CANCELLED: it is still a stopped instance
    assert back.cloud_id == parked.cloud_id
    cluster.pump()  # the stale launch message starts nothing
    assert cluster.cloud.api_calls["start"] == 0
    assert record_of(cluster, parked.id).state is IS.STOPPED


def test_a_duplicate_launch_message_starts_the_instance_once() -> None:
    cluster = cluster_with()
    parked = park_one(cluster)
    recording = RecordingCloud(cluster.cloud)
    cluster.ctx = replace(cluster.ctx, cloud=recording)  # type: ignore[arg-type]
    submit_second(cluster)
    cluster.queue.drain(QueueName.SCHEDULE)
    run_schedule_pass(cluster.ctx)
    queued = record_of(cluster, parked.id)

    assert launch_instance(cluster.ctx, queued.id, queued.attempt) is LaunchOutcome.LAUNCHED
    started = record_of(cluster, parked.id)
    assert launch_instance(cluster.ctx, queued.id, queued.attempt) is LaunchOutcome.SKIPPED
    assert recording.starts == [parked.cloud_id]
    # A delivery that read the record while REQUESTED: the start confirms the running
    # instance, the write loses, nothing changes.
    requested = replace(
        queued.transition(IS.REQUESTED, started.requested_at or 0.0, "starting"),
        requested_at=started.requested_at,
        version=started.version - 1,
    )
    assert start_warm(cluster.ctx, requested) is LaunchOutcome.SKIPPED
    assert record_of(cluster, parked.id) == started
    assert len(cluster.cloud.billed_runs(parked.cloud_id or "", cluster.clock.now() + 100)) == 2


# ---- launch requests and max_instances -------------------------------------------------------


def test_a_pool_with_a_warm_pool_launches_stoppable_instances() -> None:
    for size, stoppable in ((1, True), (0, False)):
        cluster = cluster_with(warm_pool_size=size)
        recording = RecordingCloud(cluster.cloud)
        cluster.ctx = replace(cluster.ctx, cloud=recording)  # type: ignore[arg-type]
        cluster.submit_scripted(Script(duration_s=20), name="one")
        cluster.pump()
        assert [r.stoppable for r in recording.launches] == [stoppable]


def test_stopped_instances_do_not_count_against_max_instances() -> None:
    cluster = cluster_with(OD_1, OD_4, max_instances=1)
    parked = park_one(cluster)
    assert parked.offering == OD_1
    trial_id = cluster.submit_scripted(
        Script(duration_s=600), name="big", resources={"slots_per_trial": 4}
    )
    cluster.pump()
    fresh = [r for r in cluster.instances() if r.id != parked.id]
    assert len(fresh) == 1 and fresh[0].offering == OD_4
    assert fresh[0].planned_for == ((trial_id, 4),)
    assert record_of(cluster, parked.id).state is IS.STOPPED


def test_an_interruption_notice_for_a_stopped_instance_is_ignored() -> None:
    from corral.services.interruptions import NoticeKind, on_interruption_notice

    cluster = cluster_with()
    parked = park_one(cluster)
    assert not on_interruption_notice(cluster.ctx, parked.cloud_id or "", NoticeKind.INTERRUPTION)
    assert record_of(cluster, parked.id) == parked


def test_stopping_an_agent_to_make_room_wakes_the_scheduler_for_the_waiting_demand() -> None:
    cluster = cluster_with(OD_1, OD_4, max_instances=1)
    record = idle_agent(cluster)  # idle, well within its idle period
    trial_id = cluster.submit_scripted(
        Script(duration_s=600), name="big", resources={"slots_per_trial": 4}
    )
    cluster.pump()
    assert len(cluster.instances()) == 1  # no room under max_instances: nothing launched

    report = run_idle_reap(cluster.ctx)  # drained to make room, confirmed empty, stopped
    assert report.stopped == [record.id]
    cluster.pump()  # the reaper woke the scheduler: the launch happens now, not next minute
    fresh = [r for r in cluster.instances() if r.id != record.id]
    assert len(fresh) == 1 and fresh[0].offering == OD_4
    assert fresh[0].planned_for == ((trial_id, 4),)


def test_a_warm_start_that_never_takes_is_given_up_and_its_demand_launched_fresh() -> None:
    cluster = cluster_with()
    parked = park_one(cluster)
    submit_second(cluster)
    cluster.queue.drain(QueueName.SCHEDULE)
    run_schedule_pass(cluster.ctx)
    queued = record_of(cluster, parked.id)
    # scale-up wrote its intent and died before the start call; its message is lost.
    now = cluster.clock.now()
    stuck = replace(queued.transition(IS.REQUESTED, now, "starting"), requested_at=now)
    cluster.store.commit([stuck])
    cluster.queue.drain(QueueName.SCALE_UP)
    cluster.clock.advance(cluster.ctx.settings.reconcile.request_timeout_s + 1)
    run_reconcile(cluster.ctx)
    assert record_of(cluster, parked.id).state is IS.TERMINATED
    assert cluster.cloud.get(parked.cloud_id or "").state.is_gone  # type: ignore[union-attr]
    run_schedule_pass(cluster.ctx)  # the next pass (the timer's) launches for the trial
    cluster.pump()
    fresh = [r for r in cluster.instances() if r.id != parked.id]
    assert len(fresh) == 1 and fresh[0].state is IS.ALLOCATED


# ---- review mends ---------------------------------------------------------------------------


class RefusingCloud(RecordingCloud):
    """The simulated cloud, but every start is refused with ``error``."""

    def __init__(self, cloud: SimulatedCloud, error: LaunchError) -> None:
        super().__init__(cloud)
        self.error = error

    def start(self, cloud_id: str, token: str) -> LaunchResult:
        self.starts.append(cloud_id)
        raise self.error


def test_an_unknown_start_error_keeps_the_instance_until_its_retries_run_out() -> None:
    # A transient cloud error (an InternalError, a timeout) must not destroy a good disk:
    # the instance stays warm and is tried again, launch_error_retries times, then given up
    # and the demand launched fresh.
    cluster = cluster_with()
    parked = park_one(cluster)
    refusing = RefusingCloud(cluster.cloud, LaunchError(LaunchErrorClass.UNKNOWN, "InternalError"))
    cluster.ctx = replace(cluster.ctx, cloud=refusing)  # type: ignore[arg-type]
    trial_id = submit_second(cluster)
    cluster.pump()

    (pool,) = cluster.ctx.pools.values()
    assert refusing.starts == [parked.cloud_id] * (pool.launch_error_retries + 1)
    assert len(events(cluster, EventKind.LAUNCH_FAILED, parked.id)) == pool.launch_error_retries
    assert record_of(cluster, parked.id).state is IS.TERMINATED
    fresh = [r for r in cluster.instances() if r.id != parked.id]
    assert len(fresh) == 1 and fresh[0].planned_for == ((trial_id, 1),)


def test_a_quota_refusal_of_a_start_backs_the_pool_off_and_keeps_the_instance() -> None:
    cluster = cluster_with()
    parked = park_one(cluster)
    refusing = RefusingCloud(
        cluster.cloud, LaunchError(LaunchErrorClass.QUOTA, "VcpuLimitExceeded")
    )
    cluster.ctx = replace(cluster.ctx, cloud=refusing)  # type: ignore[arg-type]
    submit_second(cluster)
    cluster.pump()

    kept = record_of(cluster, parked.id)
    assert kept.state is IS.STOPPED and kept.launch_failures == 0
    assert cluster.cloud.get(parked.cloud_id or "").state is CloudState.STOPPED  # type: ignore[union-attr]
    assert cluster.store.pool_state("gpu").backoff_until > cluster.clock.now()
    assert events(cluster, EventKind.POOL_BACKOFF, parked.id)
    assert refusing.starts == [parked.cloud_id]  # backed off: no launch, no start


def test_an_agent_registers_on_a_warm_start_whose_answer_was_lost() -> None:
    # Scale-up started the instance and died before writing ALLOCATED: the agent booting on
    # it registers all the same (told to shut down, it would have ended the instance).
    cluster = cluster_with()
    parked = park_one(cluster)
    submit_second(cluster)
    run_schedule_pass(cluster.ctx)
    queued = record_of(cluster, parked.id)
    assert queued.state is IS.QUEUED and queued.is_warm_start
    now = cluster.clock.now()
    requested = replace(queued.transition(IS.REQUESTED, now, "starting"), requested_at=now)
    cluster.store.commit([requested])
    cluster.cloud.start(parked.cloud_id or "", requested.launch_token)  # ... and died here
    for message in cluster.queue.receive(QueueName.SCALE_UP, 100, 600.0):  # its message
        cluster.queue.delete(QueueName.SCALE_UP, message.receipt)

    agent_restarts(cluster, parked.cloud_id or "")
    cluster.run(60)
    registered = record_of(cluster, parked.id)
    assert registered.state in (IS.IDLE, IS.BUSY)
    assert registered.launched_at == now and registered.registered_at is not None


def test_a_stop_decided_before_a_warm_start_took_the_record_is_not_carried_out() -> None:
    cluster = cluster_with()
    parked = park_one(cluster)
    cluster.cloud.start(parked.cloud_id or "", "behind-our-back")  # listed running: StopCloud
    stale = rd.StopCloud(parked.cloud_id or "", "gpu", parked.id, "running behind our back")
    submit_second(cluster)
    run_schedule_pass(cluster.ctx)  # the warm start takes the record (QUEUED) meanwhile
    apply_decision(cluster.ctx, stale)
    up = (CloudState.PENDING, CloudState.RUNNING)
    assert cluster.cloud.get(parked.cloud_id or "").state in up  # type: ignore[union-attr]
