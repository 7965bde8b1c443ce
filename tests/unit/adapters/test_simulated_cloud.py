"""What only the simulated cloud does: time, faults, spot life cycle, billing. No sleeping."""

from __future__ import annotations

import pytest

from corral.adapters.memory import FakeClock, InterruptionNotice, SimulatedCloud
from corral.adapters.memory import SimulatedCloudConfig as Config
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.offerings import CapacityType, Offering
from corral.ports.cloud import CloudState, LaunchRequest, SpotRequestState

OD = Offering("p4d.24xlarge", "subnet-a", CapacityType.ON_DEMAND, 8, 36.0)  # $0.01 / s
SPOT = Offering("p4d.24xlarge", "subnet-a", CapacityType.SPOT, 8, 3.6)  # $0.001 / s
OTHER = Offering("g5.xlarge", "subnet-b", CapacityType.ON_DEMAND, 1, 1.0)
OWNER = ("managed-by", "corral-unit")


def make(**overrides: object) -> tuple[FakeClock, SimulatedCloud]:
    clock = FakeClock()
    config = Config(**{"ownership": OWNER, **overrides})  # type: ignore[arg-type]
    return clock, SimulatedCloud(clock, config)


def launch(cloud: SimulatedCloud, record: str, offering: Offering = OD, attempt: int = 0) -> str:
    result = cloud.launch(LaunchRequest(record, "gpu", offering, f"{record}-a{attempt}"))
    return result.cloud_id or ""


def state(cloud: SimulatedCloud, cloud_id: str) -> CloudState | None:
    found = cloud.get(cloud_id)
    return None if found is None else found.state


def owned_ids(cloud: SimulatedCloud) -> set[str]:
    return {i.cloud_id for i in cloud.list_owned()}


# ---- boot, tags, idempotency ----------------------------------------------------------------


def test_instances_boot_after_the_configured_delay() -> None:
    clock, cloud = make(boot_s_mean=90.0)
    cloud_id = launch(cloud, "r1")
    assert state(cloud, cloud_id) is CloudState.PENDING
    clock.advance(89.9)
    assert state(cloud, cloud_id) is CloudState.PENDING
    clock.advance(0.1)
    assert state(cloud, cloud_id) is CloudState.RUNNING


def test_boot_jitter_stays_in_bounds_and_is_seeded() -> None:
    def boot_times(seed: int) -> list[float]:
        clock, cloud = make(boot_s_mean=100.0, boot_s_jitter=30.0, seed=seed)
        t0 = clock.now()
        ids = [launch(cloud, f"r{n}") for n in range(50)]
        # Billing starts at running, so the bill up to t0 + 1000 s tells each boot time.
        per_s = OD.hourly_price / 3600.0
        return [1000.0 - cloud.billed_usd(i, until=t0 + 1000.0) / per_s for i in ids]

    first = boot_times(7)
    assert first == boot_times(7)
    assert first != boot_times(8)
    assert all(70.0 - 1e-6 <= t <= 130.0 + 1e-6 for t in first)
    assert max(first) - min(first) > 20.0  # it does jitter


def test_every_instance_carries_ownership_pool_and_record_tags() -> None:
    _, cloud = make()
    cloud_id = launch(cloud, "rec-7")
    assert cloud.tags(cloud_id) == {
        "managed-by": "corral-unit",
        "corral-pool": "gpu",
        "corral-record": "rec-7",
    }
    (listed,) = cloud.list_owned()
    assert (listed.pool, listed.record_id, listed.is_spot) == ("gpu", "rec-7", False)


def test_a_stripped_record_tag_reads_as_none_but_the_instance_stays_owned() -> None:
    _, cloud = make()
    cloud_id = launch(cloud, "r1")
    cloud.remove_tag(cloud_id, "corral-record")
    (listed,) = cloud.list_owned()
    assert listed.cloud_id == cloud_id and listed.record_id is None


def test_the_same_token_never_launches_twice() -> None:
    _, cloud = make()
    request = LaunchRequest("r1", "gpu", OD, "r1-a0")
    first = cloud.launch(request)
    assert cloud.launch(request) == first
    assert len(cloud.list_owned()) == 1
    assert cloud.api_calls["launch"] == 2
    second_attempt = cloud.launch(LaunchRequest("r1", "gpu", OD, "r1-a1"))
    assert second_attempt.cloud_id != first.cloud_id


def test_a_token_reused_with_other_parameters_is_refused() -> None:
    _, cloud = make()
    cloud.launch(LaunchRequest("r1", "gpu", OD, "tok"))
    with pytest.raises(LaunchError) as caught:
        cloud.launch(LaunchRequest("r2", "gpu", OD, "tok"))
    assert caught.value.error_class is LaunchErrorClass.INVALID_CONFIG


# ---- capacity, quota, injected errors -------------------------------------------------------


def test_set_unavailable_refuses_an_offering_key_or_a_type() -> None:
    _, cloud = make()
    cloud.set_unavailable(OD.key)
    with pytest.raises(LaunchError) as caught:
        launch(cloud, "r1")
    assert caught.value.error_class is LaunchErrorClass.CAPACITY
    assert caught.value.code == "InsufficientInstanceCapacity"
    assert launch(cloud, "r2", SPOT)  # same type, other capacity type: still fine
    cloud.set_unavailable("p4d.24xlarge")
    with pytest.raises(LaunchError):
        launch(cloud, "r3", SPOT)
    cloud.set_unavailable(OD.key, False)
    cloud.set_unavailable("p4d.24xlarge", False)
    assert launch(cloud, "r1", attempt=1)
    assert launch(cloud, "r4", OTHER)


def test_a_failed_launch_does_not_burn_its_token() -> None:
    _, cloud = make()
    cloud.set_unavailable(OD.key)
    with pytest.raises(LaunchError):
        launch(cloud, "r1")
    cloud.set_unavailable(OD.key, False)
    assert launch(cloud, "r1")  # same token, now it launches


def test_capacity_error_rate_is_seeded_and_per_offering() -> None:
    def outcomes(seed: int) -> list[bool]:
        _, cloud = make(capacity_error_rate={OD.key: 0.5, "g5.xlarge": 1.0}, seed=seed)
        refused = []
        for n in range(40):
            try:
                launch(cloud, f"r{n}")
                refused.append(False)
            except LaunchError:
                refused.append(True)
        with pytest.raises(LaunchError):
            launch(cloud, "other", OTHER)
        return refused

    first = outcomes(1)
    assert first == outcomes(1)
    assert 5 < sum(first) < 35


def test_instance_quota_counts_foreign_instances_too() -> None:
    _, cloud = make(max_instances=3)
    cloud.add_foreign_instance("m5.large")
    first = launch(cloud, "r1")
    launch(cloud, "r2")
    with pytest.raises(LaunchError) as caught:
        launch(cloud, "r3", OTHER)
    assert caught.value.error_class is LaunchErrorClass.QUOTA
    assert caught.value.code == "VcpuLimitExceeded"
    cloud.terminate([first])  # a terminated instance frees its share at once
    assert launch(cloud, "r3", OTHER)


def test_gpu_quota() -> None:
    _, cloud = make(max_gpus=17)
    launch(cloud, "r1")
    launch(cloud, "r2")  # 16 GPUs
    with pytest.raises(LaunchError) as caught:
        launch(cloud, "r3")  # 24 > 17
    assert caught.value.error_class is LaunchErrorClass.QUOTA
    assert launch(cloud, "r4", OTHER)  # 17: fits exactly


def test_open_spot_requests_count_towards_the_quota() -> None:
    _, cloud = make(max_instances=1, spot_open_s=600.0)
    result = cloud.launch(LaunchRequest("r1", "gpu", SPOT, "r1-a0"))
    with pytest.raises(LaunchError):
        launch(cloud, "r2")
    cloud.cancel_spot_requests([result.spot_request_id or ""])
    assert launch(cloud, "r2")


def test_injected_errors_are_raised_once_each_in_order() -> None:
    _, cloud = make()
    cloud.inject_error(LaunchError(LaunchErrorClass.THROTTLED, "RequestLimitExceeded"))
    cloud.inject_error(LaunchError(LaunchErrorClass.PERMISSION, "UnauthorizedOperation"))
    codes = []
    for _ in range(2):
        with pytest.raises(LaunchError) as caught:
            launch(cloud, "r1")
        codes.append(caught.value.code)
    assert codes == ["RequestLimitExceeded", "UnauthorizedOperation"]
    assert launch(cloud, "r1")


# ---- spot requests --------------------------------------------------------------------------


def test_spot_request_stays_open_then_fills() -> None:
    clock, cloud = make(spot_open_s=300.0, boot_s_mean=60.0)
    request = LaunchRequest("r1", "gpu", SPOT, "r1-a0")
    result = cloud.launch(request)
    assert result.cloud_id is None and result.spot_request_id
    (open_req,) = cloud.list_spot_requests()
    assert open_req.state is SpotRequestState.OPEN and open_req.record_id == "r1"
    assert cloud.list_owned() == []
    clock.advance(1000.0)  # nobody looked in between: the fill still happened at +300
    (filled,) = cloud.list_spot_requests()
    assert filled.state is SpotRequestState.ACTIVE and filled.instance_id
    (instance,) = cloud.list_owned()
    assert instance.is_spot and instance.spot_request_id == result.spot_request_id
    assert instance.launched_at == open_req.created_at + 300.0
    assert instance.state is CloudState.RUNNING
    replay = cloud.launch(request)
    assert replay.cloud_id == instance.cloud_id  # the token now reports the instance


def test_spot_request_stays_open_while_the_offering_is_unavailable() -> None:
    clock, cloud = make(spot_open_s=60.0)
    result = cloud.launch(LaunchRequest("r1", "gpu", SPOT, "r1-a0"))
    cloud.set_unavailable(SPOT.key)  # capacity went away after the request was accepted
    clock.advance(600.0)
    (req,) = cloud.list_spot_requests()
    assert req.state is SpotRequestState.OPEN and req.status_code == "capacity-not-available"
    cloud.cancel_spot_requests([result.spot_request_id or ""])
    (req,) = cloud.list_spot_requests()
    assert req.state is SpotRequestState.CANCELLED
    cloud.set_unavailable(SPOT.key, False)
    clock.advance(600.0)
    assert cloud.list_owned() == []  # a cancelled request never fills


def test_cancelling_a_filled_request_leaves_the_instance_running() -> None:
    clock, cloud = make(boot_s_mean=0.0)
    result = cloud.launch(LaunchRequest("r1", "gpu", SPOT, "r1-a0"))
    assert result.cloud_id and result.spot_request_id
    cloud.cancel_spot_requests([result.spot_request_id])
    (req,) = cloud.list_spot_requests()
    assert req.state is SpotRequestState.CANCELLED
    assert req.status_code == "request-canceled-and-instance-running"
    clock.advance(60.0)
    assert state(cloud, result.cloud_id) is CloudState.RUNNING


def test_a_one_time_request_closes_with_its_instance_and_later_vanishes() -> None:
    clock, cloud = make(spot_request_visible_s=4 * 3600.0)
    result = cloud.launch(LaunchRequest("r1", "gpu", SPOT, "r1-a0"))
    cloud.terminate([result.cloud_id or ""])
    (req,) = cloud.list_spot_requests()
    assert req.state is SpotRequestState.CLOSED
    assert req.status_code == "instance-terminated-by-user"
    clock.advance(4 * 3600.0)
    assert cloud.list_spot_requests() == []


# ---- interruptions --------------------------------------------------------------------------


def test_interrupt_gives_notice_then_terminates() -> None:
    clock, cloud = make(boot_s_mean=0.0, notice_s=120.0)
    heard: list[InterruptionNotice] = []
    cloud.on_interruption_notice(heard.append)
    result = cloud.launch(LaunchRequest("r1", "gpu", SPOT, "r1-a0"))
    cloud_id = result.cloud_id or ""
    t0 = clock.now()
    cloud.interrupt(cloud_id)
    assert [n.cloud_id for n in heard] == [cloud_id]
    assert heard[0].interrupt_at == t0 + 120.0 and heard[0].record_id == "r1"
    assert cloud.pending_interruptions() == heard
    assert cloud.interruption_notice(cloud_id) == heard[0]
    clock.advance(119.0)
    assert state(cloud, cloud_id) is CloudState.RUNNING
    clock.advance(1.0)
    assert state(cloud, cloud_id) is CloudState.TERMINATED
    assert cloud.pending_interruptions() == []
    assert cloud.interruption_notice(cloud_id) == heard[0]  # kept: why it ended
    assert len(heard) == 1
    (req,) = cloud.list_spot_requests()
    assert req.status_code == "instance-terminated-no-capacity"


def test_drawn_interruptions_do_not_depend_on_how_often_we_look() -> None:
    def run(look_every_s: float) -> tuple[list[tuple[str, float]], set[str]]:
        clock, cloud = make(spot_hazard_per_hour=1.0, seed=3, boot_s_mean=30.0)
        heard: list[tuple[str, float]] = []
        cloud.on_interruption_notice(lambda n: heard.append((n.cloud_id, n.notice_at)))
        for n in range(20):
            cloud.launch(LaunchRequest(f"r{n}", "gpu", SPOT, f"r{n}-a0"))
        end = clock.now() + 3600.0
        while clock.now() < end:
            clock.set(min(end, clock.now() + look_every_s))
            cloud.deliver_notices()
        alive = {i.cloud_id for i in cloud.list_owned() if not i.state.is_gone}
        return heard, alive

    often, rarely = run(10.0), run(3600.0)
    assert often == rarely
    assert 0 < len(often[0]) < 20  # about 1 - 1/e of them: some, not all


def test_terminating_before_the_notice_cancels_the_interruption() -> None:
    _, cloud = make(boot_s_mean=0.0)
    heard: list[InterruptionNotice] = []
    cloud.on_interruption_notice(heard.append)
    cloud_id = launch(cloud, "r1", SPOT)
    cloud.terminate([cloud_id])
    cloud.interrupt(cloud_id)
    assert heard == [] and cloud.pending_interruptions() == []


def test_notices_are_for_owned_instances_only() -> None:
    _, cloud = make()
    heard: list[InterruptionNotice] = []
    cloud.on_interruption_notice(heard.append)
    foreign = cloud.add_foreign_instance()
    cloud.interrupt(foreign)
    assert heard == [] and cloud.pending_interruptions() == []


# ---- termination and visibility -------------------------------------------------------------


def test_terminate_goes_through_terminating_and_vanishes_after_an_hour() -> None:
    clock, cloud = make(terminate_s=30.0, terminated_visible_s=3600.0)
    cloud_id = launch(cloud, "r1")
    cloud.terminate([cloud_id])
    assert state(cloud, cloud_id) is CloudState.TERMINATING
    cloud.terminate([cloud_id])  # idempotent: does not push the end back
    clock.advance(30.0)
    (listed,) = cloud.list_owned()
    assert listed.state is CloudState.TERMINATED
    clock.advance(3599.0)
    assert owned_ids(cloud) == {cloud_id}
    clock.advance(1.0)
    assert cloud.list_owned() == []
    assert state(cloud, cloud_id) is CloudState.TERMINATED  # all_instances/get still know it


def test_foreign_instances_are_invisible_and_untouchable() -> None:
    _, cloud = make()
    untagged = cloud.add_foreign_instance()
    other_cluster = cloud.add_foreign_instance(tags={"managed-by": "someone", "corral-pool": "x"})
    no_pool = cloud.add_foreign_instance(tags={"managed-by": "corral-unit"})
    ours = launch(cloud, "r1")
    assert owned_ids(cloud) == {ours}
    cloud.terminate([untagged, other_cluster, no_pool])
    assert {state(cloud, i) for i in (untagged, other_cluster, no_pool)} == {CloudState.RUNNING}
    assert len(cloud.all_instances()) == 4
    assert cloud.total_billed_usd() == cloud.billed_usd(ours)


# ---- billing --------------------------------------------------------------------------------


def test_billing_runs_from_running_to_termination() -> None:
    clock, cloud = make(boot_s_mean=60.0, min_billed_s=60.0)
    t0 = clock.now()
    long_run = launch(cloud, "r1")  # OD: $36/h = $0.01/s
    short_run = launch(cloud, "r2")
    never_ran = launch(cloud, "r3")
    clock.advance(30.0)
    cloud.terminate([never_ran])  # still pending: never billed
    clock.advance(40.0)  # t0 + 70: r2 has run 10 s
    cloud.terminate([short_run])  # 10 s, billed as the 60 s minimum
    clock.advance(990.0)  # t0 + 1060: r1 has run 1000 s
    assert cloud.billed_usd(long_run) == pytest.approx(10.0)
    cloud.terminate([long_run])
    clock.advance(5000.0)
    assert cloud.billed_usd(long_run) == pytest.approx(10.0)
    assert cloud.billed_usd(short_run) == pytest.approx(0.60)
    assert cloud.billed_usd(never_ran) == 0.0
    assert cloud.total_billed_usd() == pytest.approx(10.60)
    assert cloud.total_billed_usd(until=t0 + 560.0) == pytest.approx(5.0 + 0.60)
    assert cloud.billed_usd("i-unknown") == 0.0


def test_billing_stops_at_the_interruption() -> None:
    clock, cloud = make(boot_s_mean=0.0, notice_s=120.0)
    cloud_id = launch(cloud, "r1", SPOT)  # $3.6/h = $0.001/s
    clock.advance(880.0)
    cloud.interrupt(cloud_id)  # terminated at +1000
    clock.advance(10_000.0)
    assert cloud.billed_usd(cloud_id) == pytest.approx(1.0)


# ---- counters and scheduling helpers ---------------------------------------------------------


def test_api_calls_are_counted() -> None:
    _, cloud = make()
    cloud_id = launch(cloud, "r1")
    cloud.list_owned()
    cloud.list_owned()
    cloud.list_spot_requests()
    cloud.terminate([cloud_id])
    cloud.cancel_spot_requests([])
    assert cloud.api_calls == {
        "launch": 1,
        "list_owned": 2,
        "list_spot_requests": 1,
        "terminate": 1,
        "cancel_spot_requests": 1,
    }


def test_next_change_at_points_at_the_next_boot() -> None:
    clock, cloud = make(boot_s_mean=45.0)
    assert cloud.next_change_at() is None
    launch(cloud, "r1")
    assert cloud.next_change_at() == clock.now() + 45.0
    clock.advance(45.0)
    assert cloud.next_change_at() is None
