"""What only the simulated cloud does about stop and start: billing runs, disks, quota,
refusals, and spot interruptions across a stop. No sleeping."""

from __future__ import annotations

import pytest

from corral.adapters.memory import FakeClock, InterruptionNotice, SimulatedCloud
from corral.adapters.memory import SimulatedCloudConfig as Config
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.offerings import CapacityType, Offering
from corral.ports.cloud import CloudState, LaunchRequest

OD = Offering("p4d.24xlarge", "subnet-a", CapacityType.ON_DEMAND, 8, 36.0)  # $0.01 / s
SPOT = Offering("p4d.24xlarge", "subnet-a", CapacityType.SPOT, 8, 3.6)  # $0.001 / s
OWNER = ("managed-by", "corral-unit")
DISKS = {"gpu": 3.6}  # $0.001 / s while stopped


def make(**overrides: object) -> tuple[FakeClock, SimulatedCloud]:
    clock = FakeClock()
    settings = {"ownership": OWNER, "boot_s_mean": 0.0, "start_s_mean": 0.0, **overrides}
    return clock, SimulatedCloud(clock, Config(**settings))  # type: ignore[arg-type]


def launch(cloud: SimulatedCloud, record: str, offering: Offering = OD) -> str:
    request = LaunchRequest(record, "gpu", offering, f"{record}-a0", stoppable=True)
    result = cloud.launch(request)
    assert result.cloud_id is not None
    return result.cloud_id


def state(cloud: SimulatedCloud, cloud_id: str) -> CloudState | None:
    found = cloud.get(cloud_id)
    return None if found is None else found.state


def refused(cloud: SimulatedCloud, cloud_id: str) -> LaunchErrorClass:
    with pytest.raises(LaunchError) as error:
        cloud.start(cloud_id, "tok")
    return error.value.error_class


# ---- billing --------------------------------------------------------------------------------


def test_each_run_is_billed_with_its_own_minimum_and_the_disks_while_stopped() -> None:
    clock, cloud = make(stopped_usd_per_hour=DISKS)
    t0 = clock.now()
    cloud_id = launch(cloud, "r1")
    clock.advance(30)  # a 30 s run: billed the 60 s minimum
    assert cloud.stop([cloud_id]) == {cloud_id}
    clock.advance(1000)  # stopped: disks only
    t1 = clock.now()
    assert cloud.start(cloud_id, "r1-a1").launched_at == t1
    clock.advance(100)  # a second run of 100 s
    cloud.stop([cloud_id])
    clock.advance(500)
    end = clock.now()

    assert cloud.billed_runs(cloud_id) == [(t0, t0 + 60), (t1, t1 + 100)]
    assert cloud.stopped_usd(cloud_id) == pytest.approx((1000 + 500) * 0.001)
    compute = (60 + 100) * 0.01
    assert cloud.billed_usd(cloud_id) == pytest.approx(compute + 1.5)
    assert cloud.total_billed_usd() == pytest.approx(compute + 1.5)
    # Asked about an earlier time, only what was owed then.
    assert cloud.stopped_usd(cloud_id, until=end - 500) == pytest.approx(1.0)


def test_a_short_second_run_pays_its_own_minimum() -> None:
    clock, cloud = make()
    cloud_id = launch(cloud, "r1")
    clock.advance(200)
    cloud.stop([cloud_id])
    clock.advance(10)
    cloud.start(cloud_id, "r1-a1")
    clock.advance(5)
    cloud.stop([cloud_id])
    clock.advance(10)
    assert [end - start for start, end in cloud.billed_runs(cloud_id)] == [200, 60]
    assert cloud.billed_usd(cloud_id) == pytest.approx(260 * 0.01)


def test_a_running_run_is_billed_up_to_now() -> None:
    clock, cloud = make(start_s_mean=15.0)
    cloud_id = launch(cloud, "r1")
    clock.advance(100)
    cloud.stop([cloud_id])
    clock.advance(100)
    t1 = clock.now()
    cloud.start(cloud_id, "r1-a1")
    assert state(cloud, cloud_id) is CloudState.PENDING  # the start's pending phase
    clock.advance(15)
    assert state(cloud, cloud_id) is CloudState.RUNNING
    clock.advance(85)
    # Billed from running (pending is free); the minimum is owed once the run has ended.
    assert cloud.billed_runs(cloud_id)[-1] == (t1 + 15, t1 + 100)


def test_disks_are_billed_only_once_stopped_and_never_without_a_price() -> None:
    clock, cloud = make(stop_s=30.0, stopped_usd_per_hour=DISKS)
    cloud_id = launch(cloud, "r1")
    clock.advance(100)
    assert cloud.stopped_usd(cloud_id) == 0.0  # running: compute only
    cloud.stop([cloud_id])
    assert state(cloud, cloud_id) is CloudState.STOPPING
    clock.advance(30)
    assert state(cloud, cloud_id) is CloudState.STOPPED
    assert cloud.stopped_usd(cloud_id) == 0.0  # stopping: neither
    clock.advance(100)
    assert cloud.stopped_usd(cloud_id) == pytest.approx(0.1)
    # Compute stopped at the stop call, not when the instance reached STOPPED.
    assert cloud.billed_runs(cloud_id) == [(clock.now() - 230, clock.now() - 130)]

    other_clock, unpriced = make()  # no disk price for the pool: stopped costs nothing
    other = launch(unpriced, "r2")
    other_clock.advance(100)
    unpriced.stop([other])
    other_clock.advance(1000)
    assert unpriced.stopped_usd(other) == 0.0
    assert unpriced.billed_usd(other) == pytest.approx(1.0)


def test_disks_are_billed_by_the_pool_tag() -> None:
    clock, cloud = make(stopped_usd_per_hour={"gpu": 3.6, "cpu": 36.0})
    gpu = launch(cloud, "r1")
    cpu = cloud.launch(LaunchRequest("r2", "cpu", OD, "r2-a0", stoppable=True)).cloud_id
    assert cpu is not None
    cloud.stop([gpu, cpu])
    clock.advance(100)
    assert cloud.stopped_usd(gpu) == pytest.approx(0.1)
    assert cloud.stopped_usd(cpu) == pytest.approx(1.0)


def test_terminating_a_stopped_instance_ends_its_disk_billing() -> None:
    clock, cloud = make(stopped_usd_per_hour=DISKS)
    cloud_id = launch(cloud, "r1")
    clock.advance(100)
    cloud.stop([cloud_id])
    clock.advance(100)
    assert cloud.terminate([cloud_id]) == {cloud_id}
    clock.advance(10_000)
    assert cloud.stopped_usd(cloud_id) == pytest.approx(0.1)
    assert cloud.billed_runs(cloud_id) == [(clock.now() - 10_200, clock.now() - 10_100)]


# ---- quota ----------------------------------------------------------------------------------


def test_a_stopped_instance_holds_no_quota_and_a_start_needs_it_again() -> None:
    clock, cloud = make(max_instances=1)
    first = launch(cloud, "r1")
    with pytest.raises(LaunchError) as full:
        launch(cloud, "r2")
    assert full.value.error_class is LaunchErrorClass.QUOTA
    cloud.stop([first])
    second = launch(cloud, "r2")  # the stopped one gave its place back
    assert refused(cloud, first) is LaunchErrorClass.QUOTA
    assert state(cloud, first) is CloudState.STOPPED  # refused: still stopped
    cloud.terminate([second])
    clock.advance(1)
    assert cloud.start(first, "r1-a1").cloud_id == first


def test_terminating_a_stopped_instance_does_not_give_its_quota_back_twice() -> None:
    clock, cloud = make(max_instances=1)
    first = launch(cloud, "r1")
    cloud.stop([first])
    cloud.terminate([first])
    clock.advance(1)
    launch(cloud, "r2")
    with pytest.raises(LaunchError) as full:
        launch(cloud, "r3")  # one place, taken by r2
    assert full.value.error_class is LaunchErrorClass.QUOTA


# ---- refusals and odd states ----------------------------------------------------------------


def test_a_start_is_refused_for_capacity_during_an_outage() -> None:
    _, cloud = make()
    cloud_id = launch(cloud, "r1")
    cloud.stop([cloud_id])
    cloud.set_unavailable(OD.key)
    assert refused(cloud, cloud_id) is LaunchErrorClass.CAPACITY
    assert state(cloud, cloud_id) is CloudState.STOPPED
    cloud.set_unavailable(OD.instance_type)
    cloud.set_unavailable(OD.key, False)
    assert refused(cloud, cloud_id) is LaunchErrorClass.CAPACITY  # the whole type is out
    cloud.set_unavailable(OD.instance_type, False)
    assert cloud.start(cloud_id, "r1-a1").cloud_id == cloud_id


def test_a_pending_instance_can_be_stopped_and_was_never_billed() -> None:
    clock, cloud = make(boot_s_mean=60.0, stopped_usd_per_hour=DISKS)
    cloud_id = launch(cloud, "r1")
    assert state(cloud, cloud_id) is CloudState.PENDING
    clock.advance(10)
    assert cloud.stop([cloud_id]) == {cloud_id}
    clock.advance(100)  # past when it would have run
    assert state(cloud, cloud_id) is CloudState.STOPPED
    assert cloud.billed_runs(cloud_id) == []
    assert cloud.billed_usd(cloud_id) == pytest.approx(0.1)  # its disks only
    t1 = clock.now()
    cloud.start(cloud_id, "r1-a1")
    clock.advance(100)
    assert cloud.billed_runs(cloud_id) == [(t1, t1 + 100)]


def test_a_start_while_still_stopping_is_throttled_then_works() -> None:
    clock, cloud = make(stop_s=30.0)
    cloud_id = launch(cloud, "r1")
    cloud.stop([cloud_id])
    clock.advance(29)
    assert refused(cloud, cloud_id) is LaunchErrorClass.THROTTLED
    assert state(cloud, cloud_id) is CloudState.STOPPING
    clock.advance(1)
    assert cloud.start(cloud_id, "r1-a1").cloud_id == cloud_id


def test_stop_of_a_stopping_or_stopped_instance_confirms_it_and_changes_nothing() -> None:
    clock, cloud = make(stop_s=30.0, stopped_usd_per_hour=DISKS)
    cloud_id = launch(cloud, "r1")
    clock.advance(100)
    cloud.stop([cloud_id])
    clock.advance(10)
    assert cloud.stop([cloud_id]) == {cloud_id}  # still stopping: not restarted
    clock.advance(20)
    assert cloud.stop([cloud_id]) == {cloud_id}
    clock.advance(100)
    assert cloud.stopped_usd(cloud_id) == pytest.approx(0.1)
    assert cloud.billed_runs(cloud_id) == [(clock.now() - 230, clock.now() - 130)]


def test_stop_skips_a_terminating_instance() -> None:
    _, cloud = make(terminate_s=60.0)
    cloud_id = launch(cloud, "r1")
    cloud.terminate([cloud_id])
    assert cloud.stop([cloud_id]) == frozenset()
    assert state(cloud, cloud_id) is CloudState.TERMINATING
    assert refused(cloud, cloud_id) is LaunchErrorClass.INVALID_CONFIG


def test_stop_and_start_are_counted_api_calls() -> None:
    _, cloud = make()
    cloud_id = launch(cloud, "r1")
    cloud.stop([cloud_id])
    cloud.start(cloud_id, "r1-a1")
    assert (cloud.api_calls["stop"], cloud.api_calls["start"]) == (1, 1)


# ---- spot interruptions across a stop -------------------------------------------------------


def spot_cloud() -> tuple[FakeClock, SimulatedCloud, list[InterruptionNotice]]:
    clock, cloud = make(spot_hazard_per_hour=1.0, notice_s=120.0, seed=3)
    notices: list[InterruptionNotice] = []
    cloud.on_interruption_notice(notices.append)
    return clock, cloud, notices


def test_a_stop_drops_an_interruption_not_announced_yet_and_a_start_draws_a_new_one() -> None:
    clock, cloud, notices = spot_cloud()
    t0 = clock.now()
    cloud_id = launch(cloud, "r1", SPOT)
    first_notice = cloud.next_change_at()
    assert first_notice is not None and first_notice - t0 > 300  # the seed's draw
    clock.advance(first_notice - t0 - 100)
    assert cloud.stop([cloud_id]) == {cloud_id}
    clock.advance(100 + 120 + 3600)  # well past the dropped notice and interruption
    assert notices == []
    assert state(cloud, cloud_id) is CloudState.STOPPED

    t1 = clock.now()
    cloud.start(cloud_id, "r1-a1")
    second_notice = cloud.next_change_at()
    assert second_notice is not None and second_notice >= t1  # drawn for the new run
    clock.advance(second_notice - t1)
    cloud.deliver_notices()
    assert [n.cloud_id for n in notices] == [cloud_id]
    assert notices[0].notice_at >= t1
    clock.advance(120)
    assert state(cloud, cloud_id) is CloudState.TERMINATED
    # Billed: the first run up to its stop, the second up to its interruption.
    runs = cloud.billed_runs(cloud_id)
    assert len(runs) == 2 and runs[1][1] == pytest.approx(notices[0].interrupt_at)


def test_an_instance_gone_while_stopped_bills_no_disks_after() -> None:
    # The notice came before the stop: the interruption still takes the stopped instance
    # (the cloud's decision); once it is gone, nothing is billed for it any more.
    clock, cloud = make(stopped_usd_per_hour=DISKS)
    cloud_id = launch(cloud, "r1", SPOT)
    clock.advance(100)
    cloud.interrupt(cloud_id, notice_s=120.0)
    assert cloud.stop([cloud_id]) == {cloud_id}
    clock.advance(1000)
    assert state(cloud, cloud_id) is CloudState.TERMINATED
    # Stopped at 100 s, gone at 220 s: 120 s of disks at most.
    assert cloud.stopped_usd(cloud_id) <= 120 * 0.001 + 1e-9
