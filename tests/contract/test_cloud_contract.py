"""The CloudProvider contract (corral.ports.cloud), run against every registered provider.

Only behaviour that real EC2, moto and Compute Engine share is asserted here: no timing, no
open spot requests (moto fills at once). Token idempotency is asserted on every backend that
has it (the simulated cloud; GCE's requestId on the fake server) and is a strict expected
failure on moto, which ignores ClientToken (``CloudHarness.token_gap``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.ports.cloud import CloudInstance, CloudProvider, CloudState, LaunchRequest

if TYPE_CHECKING:  # conftest is not importable as a module at run time; types only
    from tests.contract.conftest import CloudHarness


def launch(env: CloudHarness, record_id: str, pool: str = "gpu", spot: bool = False) -> str:
    offering = env.spot if spot else env.on_demand
    result = env.cloud.launch(LaunchRequest(record_id, pool, offering, f"{record_id}-a0"))
    assert result.cloud_id is not None or result.spot_request_id is not None
    return result.cloud_id or ""


def owned(cloud: CloudProvider) -> dict[str, CloudInstance]:
    return {i.cloud_id: i for i in cloud.list_owned()}


def alive(instance: CloudInstance | None) -> bool:
    return instance is not None and not instance.state.is_gone


def test_nothing_is_owned_at_first(cloud: CloudProvider) -> None:
    assert cloud.list_owned() == []
    assert cloud.list_spot_requests() == []


def test_launched_instance_is_listed_with_its_pool_and_record(cloud_env: CloudHarness) -> None:
    cloud_id = launch(cloud_env, "rec-1", pool="gpu")
    listed = owned(cloud_env.cloud)[cloud_id]
    assert listed.pool == "gpu"
    assert listed.record_id == "rec-1"
    assert listed.instance_type == cloud_env.on_demand.instance_type
    assert not listed.is_spot
    assert listed.state in (CloudState.PENDING, CloudState.RUNNING)


def test_instances_of_several_pools_keep_their_pool(cloud_env: CloudHarness) -> None:
    a = launch(cloud_env, "rec-a", pool="pool-a")
    b = launch(cloud_env, "rec-b", pool="pool-b")
    listed = owned(cloud_env.cloud)
    assert (listed[a].pool, listed[a].record_id) == ("pool-a", "rec-a")
    assert (listed[b].pool, listed[b].record_id) == ("pool-b", "rec-b")


def test_foreign_instances_are_never_listed_nor_terminated(cloud_env: CloudHarness) -> None:
    key, value = cloud_env.ownership
    foreign = [
        cloud_env.add_foreign({}),
        cloud_env.add_foreign({"Name": "someone-elses"}),
        cloud_env.add_foreign({key: "another-cluster", "corral-pool": "gpu"}),
        cloud_env.add_foreign({key: value.upper() + "-x"}),
    ]
    ours = launch(cloud_env, "rec-1")
    assert set(owned(cloud_env.cloud)) == {ours}
    assert cloud_env.cloud.terminate([*foreign, ours]) == {ours}
    for cloud_id in foreign:
        assert cloud_env.raw_state(cloud_id) in (CloudState.PENDING, CloudState.RUNNING)
    assert not alive(owned(cloud_env.cloud).get(ours))


def test_terminate_is_idempotent_and_the_instance_goes(cloud_env: CloudHarness) -> None:
    cloud_id = launch(cloud_env, "rec-1")
    keep = launch(cloud_env, "rec-2")
    assert cloud_env.cloud.terminate([cloud_id]) == {cloud_id}
    again = cloud_env.cloud.terminate([cloud_id])
    # A repeat (a retried message) confirms it while the cloud still lists it; once it is
    # gone from the listing nothing can tell it from an unknown id, and the reconciler
    # settles the record from the listing instead.
    assert again == ({cloud_id} if cloud_id in owned(cloud_env.cloud) else frozenset())
    listed = owned(cloud_env.cloud)
    # Gone from the listing or listed as terminating/terminated: reconcile treats both alike.
    assert not alive(listed.get(cloud_id))
    assert alive(listed.get(keep))


def test_terminate_skips_unknown_ids_and_empty_lists(cloud_env: CloudHarness) -> None:
    keep = launch(cloud_env, "rec-1")
    assert cloud_env.cloud.terminate([cloud_env.unknown_id]) == frozenset()
    assert cloud_env.cloud.terminate([]) == frozenset()
    assert alive(owned(cloud_env.cloud).get(keep))


def test_cancel_spot_requests_skips_unknown_ids(cloud: CloudProvider) -> None:
    cloud.cancel_spot_requests(["sir-00000000"])
    cloud.cancel_spot_requests([])


def test_spot_launch_is_tagged_with_pool_and_record(cloud_env: CloudHarness) -> None:
    result = cloud_env.cloud.launch(LaunchRequest("rec-s", "gpu", cloud_env.spot, "rec-s-a0"))
    if result.cloud_id is not None:
        listed = owned(cloud_env.cloud)[result.cloud_id]
        assert listed.is_spot
        assert (listed.pool, listed.record_id) == ("gpu", "rec-s")
    else:
        requests = {r.request_id: r for r in cloud_env.cloud.list_spot_requests()}
        request = requests[result.spot_request_id or ""]
        assert (request.pool, request.record_id) == ("gpu", "rec-s")


@pytest.mark.parametrize("spot", [False, True], ids=["on-demand", "spot"])
def test_a_repeated_launch_token_yields_one_instance(
    cloud_env: CloudHarness, request: pytest.FixtureRequest, spot: bool
) -> None:
    """A launch message delivered twice (or a retry after a crash) calls the cloud again with
    the same token: the cloud answers with what it made the first time."""
    if cloud_env.token_gap is not None:
        request.applymarker(pytest.mark.xfail(reason=cloud_env.token_gap, strict=True))
    offering = cloud_env.spot if spot else cloud_env.on_demand
    launch_request = LaunchRequest("rec-t", "gpu", offering, "rec-t-a0")
    first = cloud_env.cloud.launch(launch_request)
    again = cloud_env.cloud.launch(launch_request)
    assert again.cloud_id == first.cloud_id or first.cloud_id is None
    assert again.spot_request_id == first.spot_request_id
    ours = [i for i in cloud_env.cloud.list_owned() if i.record_id == "rec-t"]
    assert len(ours) <= 1
    assert len([r for r in cloud_env.cloud.list_spot_requests() if r.record_id == "rec-t"]) <= 1
    other = cloud_env.cloud.launch(LaunchRequest("rec-u", "gpu", offering, "rec-u-a0"))
    assert (other.cloud_id, other.spot_request_id) != (first.cloud_id, first.spot_request_id)


# ---- stop and start (the warm pool) ---------------------------------------------------------
def launch_stoppable(env: CloudHarness, record_id: str, spot: bool = False) -> str:
    offering = env.spot if spot else env.on_demand
    request = LaunchRequest(record_id, "gpu", offering, f"{record_id}-a0", stoppable=True)
    result = env.cloud.launch(request)
    assert result.cloud_id is not None
    return result.cloud_id


@pytest.mark.parametrize("spot", [False, True], ids=["on-demand", "spot"])
def test_a_stopped_instance_keeps_its_tags_and_starts_again(
    cloud_env: CloudHarness, spot: bool
) -> None:
    cloud_id = launch_stoppable(cloud_env, "rec-w", spot=spot)
    assert cloud_env.cloud.stop([cloud_id]) == {cloud_id}
    listed = owned(cloud_env.cloud)[cloud_id]
    assert listed.state is CloudState.STOPPED
    assert (listed.pool, listed.record_id, listed.is_spot) == ("gpu", "rec-w", spot)
    started = cloud_env.cloud.start(cloud_id, "rec-w-a1")
    assert started.cloud_id == cloud_id
    again = owned(cloud_env.cloud)[cloud_id]
    assert again.state in (CloudState.PENDING, CloudState.RUNNING)
    assert (again.pool, again.record_id) == ("gpu", "rec-w")


def test_stop_is_idempotent_and_skips_what_is_not_ours(cloud_env: CloudHarness) -> None:
    key, _ = cloud_env.ownership
    foreign = cloud_env.add_foreign({key: "another-cluster", "corral-pool": "gpu"})
    cloud_id = launch_stoppable(cloud_env, "rec-w")
    assert cloud_env.cloud.stop([foreign, cloud_env.unknown_id, cloud_id]) == {cloud_id}
    assert cloud_env.cloud.stop([cloud_id]) == {cloud_id}
    assert cloud_env.cloud.stop([]) == frozenset()
    assert cloud_env.raw_state(foreign) in (CloudState.PENDING, CloudState.RUNNING)


def test_start_of_a_running_instance_confirms_it(cloud_env: CloudHarness) -> None:
    cloud_id = launch_stoppable(cloud_env, "rec-w")
    assert cloud_env.cloud.start(cloud_id, "rec-w-a0").cloud_id == cloud_id
    assert owned(cloud_env.cloud)[cloud_id].state in (CloudState.PENDING, CloudState.RUNNING)


def test_start_refuses_what_is_not_ours_or_gone(cloud_env: CloudHarness) -> None:
    key, _ = cloud_env.ownership
    foreign = cloud_env.add_foreign({key: "another-cluster", "corral-pool": "gpu"})
    gone = launch_stoppable(cloud_env, "rec-g")
    cloud_env.cloud.terminate([gone])
    for cloud_id in (foreign, cloud_env.unknown_id, gone):
        with pytest.raises(LaunchError) as refused:
            cloud_env.cloud.start(cloud_id, "rec-x-a0")
        assert refused.value.error_class is LaunchErrorClass.INVALID_CONFIG


def test_a_stopped_instance_can_be_terminated(cloud_env: CloudHarness) -> None:
    cloud_id = launch_stoppable(cloud_env, "rec-w", spot=True)
    cloud_env.cloud.stop([cloud_id])
    assert cloud_env.cloud.terminate([cloud_id]) == {cloud_id}
    assert not alive(owned(cloud_env.cloud).get(cloud_id))
    # Nothing comes back in its place (EC2 relaunches for an uncancelled persistent request).
    assert [i for i in cloud_env.cloud.list_owned() if alive(i)] == []
