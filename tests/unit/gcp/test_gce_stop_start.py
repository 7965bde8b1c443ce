"""The GCE provider's warm pool (stop / start) through google-cloud-compute against the fake
REST server: what reaches the wire, requestIds, the status table, telling a VM being deleted
from one being stopped, and the classified refusals of a start."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from corral.adapters.gcp.gce_errors import classify
from corral.adapters.gcp.gce_params import request_id, start_request_id, stop_request_id
from corral.adapters.memory import FakeClock
from corral.domain.cloud_view import CloudState
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.offerings import CapacityType
from corral.ports.cloud import LaunchRequest

pytest.importorskip("google.cloud.compute_v1", reason="google-cloud-compute not installed")

from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from corral.adapters.gcp.gce_provider import GCE_STATES, GceProvider
from tests.contract.gce_harness import PROJECT, ZONE, gcp_block
from tests.fakes.gce_server import FakeGceServer, Fault, Recorded

C = LaunchErrorClass
NAME = "corral-agent-inst-1"
KEY = (PROJECT, ZONE, NAME)


@pytest.fixture
def server() -> Iterator[FakeGceServer]:
    with FakeGceServer() as running:
        yield running


@pytest.fixture
def cloud(server: FakeGceServer) -> GceProvider:
    return GceProvider(
        {"gpu": gcp_block()},  # type: ignore[dict-item]
        client_options={"api_endpoint": server.endpoint},
        credentials=AnonymousCredentials(),
        clock=FakeClock(1_000.0),
        max_wait_s=5.0,
    )


def launch(cloud: GceProvider, record: str = "inst-1", spot: bool = True) -> str:
    offering = next(
        o
        for o in gcp_block().offerings()  # type: ignore[attr-defined]
        if o.capacity_type is (CapacityType.SPOT if spot else CapacityType.ON_DEMAND)
    )
    result = cloud.launch(LaunchRequest(record, "gpu", offering, f"{record}-a0", stoppable=True))
    assert result.cloud_id is not None
    return result.cloud_id


def calls(server: FakeGceServer, action: str) -> list[Recorded]:
    return [r for r in server.state.requests if r.path.endswith(f"/{action}")]


def state_of(cloud: GceProvider, name: str = NAME) -> CloudState:
    return {i.cloud_id: i.state for i in cloud.list_owned()}[name]


def refused(cloud: GceProvider, name: str = NAME, token: str = "inst-1-a1") -> LaunchError:
    with pytest.raises(LaunchError) as raised:
        cloud.start(name, token)
    return raised.value


# ---- the status table --------------------------------------------------------------------
def test_gce_statuses_map_to_stopped_and_stopping() -> None:
    assert GCE_STATES["TERMINATED"] is CloudState.STOPPED  # GCE's word for a stopped VM
    assert GCE_STATES["STOPPING"] is CloudState.STOPPING
    assert GCE_STATES["PENDING_STOP"] is CloudState.STOPPING  # graceful shutdown first
    assert GCE_STATES["PENDING"] is CloudState.PENDING  # a Flex-start VM awaiting capacity
    assert classify(["resourceNotReady"], 400) is C.THROTTLED  # busy: another operation runs


# ---- stop --------------------------------------------------------------------------------
def test_stop_on_the_wire(server: FakeGceServer, cloud: GceProvider) -> None:
    name = launch(cloud)
    booted = server.state.instances[KEY]["lastStartTimestamp"]
    assert cloud.stop([name]) == {name}
    (stop,) = calls(server, "stop")
    assert stop.path == f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/{NAME}/stop"
    assert stop.query["requestId"] == stop_request_id(NAME, booted, "")
    assert "discardLocalSsd" not in stop.query  # no local SSD: nothing to say about them
    assert server.state.status(NAME) == "TERMINATED"
    assert state_of(cloud) is CloudState.STOPPED


def test_a_stopped_or_stopping_vm_is_confirmed_without_a_call(
    server: FakeGceServer, cloud: GceProvider
) -> None:
    name = launch(cloud)
    server.state.hold.add("stop")
    assert cloud.stop([name]) == {name}
    assert state_of(cloud) is CloudState.STOPPING
    assert cloud.stop([name]) == {name}  # still stopping
    server.state.settle()
    assert cloud.stop([name]) == {name}  # stopped
    assert len(calls(server, "stop")) == 1


@pytest.mark.parametrize("restart", ["RUNNING", "STAGING"], ids=["restarted", "restarting"])
def test_each_boot_is_stopped_with_a_request_id_of_its_own(
    server: FakeGceServer, cloud: GceProvider, restart: str
) -> None:
    """A stop's requestId is per boot: the stop after a restart is not the first stop again
    (GCE would answer a repeated id with the old operation and stop nothing), even while the
    restart is under way and GCE has not yet changed lastStartTimestamp."""
    name = launch(cloud)
    cloud.stop([name])
    server.state.instances[KEY]["status"] = restart  # started again by someone
    assert cloud.stop([name]) == {name}
    first, second = calls(server, "stop")
    assert first.query["requestId"] != second.query["requestId"]
    assert server.state.status(NAME) == "TERMINATED"


def test_local_ssds_are_discarded_on_stop(server: FakeGceServer, cloud: GceProvider) -> None:
    name = launch(cloud)
    server.state.instances[KEY]["disks"].append({"type": "SCRATCH", "interface": "NVME"})
    assert cloud.stop([name]) == {name}
    (stop,) = calls(server, "stop")
    assert stop.query["discardLocalSsd"] == "true"


def test_stop_leaves_foreign_vms_alone(server: FakeGceServer, cloud: GceProvider) -> None:
    server.state.add_instance(PROJECT, ZONE, "theirs", {"managed-by": "someone-else"})
    assert cloud.stop(["theirs"]) == frozenset()
    assert calls(server, "stop") == []
    assert server.state.status("theirs") == "RUNNING"


def test_a_refused_stop_is_not_confirmed(server: FakeGceServer, cloud: GceProvider) -> None:
    name = launch(cloud)
    server.state.hold.add("start")
    cloud.stop([name])
    cloud._max_wait_s = 0.0  # the held operation never ends: do not wait for it in real time
    cloud.start(name, "inst-1-a1")  # held half done: STAGING, its operation running
    assert cloud.stop([name]) == frozenset()  # GCE: resourceNotReady; no exception
    assert server.state.status(NAME) == "STAGING"


# ---- a VM being deleted is gone, not stopping -----------------------------------------------
def test_a_vm_being_deleted_is_listed_terminating(
    server: FakeGceServer, cloud: GceProvider
) -> None:
    name = launch(cloud)
    keep = launch(cloud, "inst-2")
    server.state.hold.add("delete")
    cloud.terminate([name])
    assert server.state.status(NAME) == "STOPPING"  # as GCE shows a delete under way
    listed = {i.cloud_id: i.state for i in cloud.list_owned()}
    assert listed == {name: CloudState.TERMINATING, keep: CloudState.RUNNING}
    assert cloud.stop([name]) == frozenset()
    assert refused(cloud, name).error_class is C.INVALID_CONFIG
    assert calls(server, "stop") == calls(server, "start") == []


def test_a_stopped_vm_being_deleted_is_listed_terminating(
    server: FakeGceServer, cloud: GceProvider
) -> None:
    name = launch(cloud)
    cloud.stop([name])
    server.state.hold.add("delete")
    server.state.instances[KEY]["status"] = "TERMINATED"
    cloud.terminate([name])
    server.state.instances[KEY]["status"] = "TERMINATED"  # GCE may show it so to the end
    assert state_of(cloud) is CloudState.TERMINATING
    server.state.settle()
    assert cloud.list_owned() == []


def test_operations_are_looked_up_only_for_a_vm_that_could_be_going(
    server: FakeGceServer, cloud: GceProvider
) -> None:
    name = launch(cloud)
    cloud.list_owned()
    lookups = [r for r in server.state.requests if r.path.endswith("/operations")]
    assert lookups == []  # RUNNING: no question to ask
    cloud.stop([name])
    assert state_of(cloud) is CloudState.STOPPED
    (lookup,) = [r for r in server.state.requests if r.path.endswith("/operations")]
    assert lookup.query["filter"] == '(operationType = "delete") (status != "DONE")'


# ---- start -------------------------------------------------------------------------------
def test_start_on_the_wire(server: FakeGceServer, cloud: GceProvider) -> None:
    name = launch(cloud)
    cloud.stop([name])
    result = cloud.start(name, "inst-1-a0")  # the launch's own token, reused
    assert (result.cloud_id, result.launched_at) == (name, 1_000.0)
    (start,) = calls(server, "start")
    assert start.path == f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/{NAME}/start"
    assert start.query["requestId"] == start_request_id("inst-1-a0")
    assert start.query["requestId"] != request_id("inst-1-a0")  # never the insert's id
    assert state_of(cloud) is CloudState.RUNNING


def test_a_repeated_start_token_starts_once(server: FakeGceServer, cloud: GceProvider) -> None:
    name = launch(cloud)
    cloud.stop([name])
    server.state.hold.add("start")
    cloud._max_wait_s = 0.0  # the start operation is still running: a start all the same
    assert cloud.start(name, "inst-1-a1").cloud_id == name
    server.state.instances[KEY]["status"] = "TERMINATED"  # as if the listing were stale
    assert cloud.start(name, "inst-1-a1").cloud_id == name
    ops = {r.query["requestId"] for r in calls(server, "start")}
    assert len(ops) == 1
    starts = [o for o in server.state.operations.values() if o["operationType"] == "start"]
    assert len(starts) == 1


def test_start_of_a_running_vm_reports_its_boot_time(
    server: FakeGceServer, cloud: GceProvider
) -> None:
    name = launch(cloud)
    booted = server.state.instances[KEY]["lastStartTimestamp"]
    result = cloud.start(name, "inst-1-a1")
    assert result.launched_at == datetime.fromisoformat(booted).timestamp()
    assert calls(server, "start") == []


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (Fault(op_error_code="ZONE_RESOURCE_POOL_EXHAUSTED"), C.CAPACITY),
        (Fault(op_error_code="ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"), C.CAPACITY),
        (Fault(op_error_code="QUOTA_EXCEEDED"), C.QUOTA),
        (Fault(http_status=403, reason="quotaExceeded"), C.QUOTA),
        (Fault(http_status=403, reason="rateLimitExceeded"), C.THROTTLED),
        (Fault(http_status=503, reason="backendError"), C.UNKNOWN),
    ],
)
def test_a_refused_start_is_classified_and_the_vm_stays_stopped(
    server: FakeGceServer, cloud: GceProvider, fault: Fault, expected: C
) -> None:
    name = launch(cloud)
    cloud.stop([name])
    server.state.fail_next_start(fault)
    error = refused(cloud, name)
    assert (error.error_class, error.code) == (expected, fault.op_error_code or fault.reason)
    assert state_of(cloud) is CloudState.STOPPED


def test_start_while_stopping_is_throttled(server: FakeGceServer, cloud: GceProvider) -> None:
    name = launch(cloud)
    server.state.hold.add("stop")
    cloud.stop([name])
    error = refused(cloud, name)
    assert (error.error_class, error.code) == (C.THROTTLED, "InstanceStopping")
    assert calls(server, "start") == []
    server.state.settle()
    assert cloud.start(name, "inst-1-a1").cloud_id == name


def test_a_suspended_vm_is_not_started(server: FakeGceServer, cloud: GceProvider) -> None:
    name = launch(cloud)
    server.state.instances[KEY]["status"] = "SUSPENDED"  # not by Corral: it never suspends
    error = refused(cloud, name)
    assert (error.error_class, error.code) == (C.INVALID_CONFIG, "InstanceNotStartable")


def test_start_refuses_a_foreign_vm(server: FakeGceServer, cloud: GceProvider) -> None:
    server.state.add_instance(PROJECT, ZONE, "theirs", {"managed-by": "someone-else"})
    server.state.instances[(PROJECT, ZONE, "theirs")]["status"] = "TERMINATED"
    error = refused(cloud, "theirs")
    assert (error.error_class, error.code) == (C.INVALID_CONFIG, "InstanceNotFound")
    assert calls(server, "start") == []


# ---- the fake itself ------------------------------------------------------------------------
def raw_client(server: FakeGceServer) -> Any:
    return compute_v1.InstancesClient(
        transport="rest",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": server.endpoint},
    )


def test_the_fake_refuses_to_start_a_deleted_vm(server: FakeGceServer, cloud: GceProvider) -> None:
    launch(cloud)
    client = raw_client(server)
    client.delete_unary(project=PROJECT, zone=ZONE, instance=NAME)
    with pytest.raises(exceptions.NotFound):
        client.start_unary(project=PROJECT, zone=ZONE, instance=NAME)


def test_the_fake_dedupes_stop_and_start_by_request_id(
    server: FakeGceServer, cloud: GceProvider
) -> None:
    launch(cloud)
    client = raw_client(server)
    stop = compute_v1.StopInstanceRequest(
        project=PROJECT, zone=ZONE, instance=NAME, request_id="r-1"
    )
    first = client.stop_unary(request=stop)
    assert server.state.status(NAME) == "TERMINATED"
    client.start_unary(project=PROJECT, zone=ZONE, instance=NAME)
    again = client.stop_unary(request=stop)
    assert again.name == first.name
    assert server.state.status(NAME) == "RUNNING"  # the repeated stop did nothing


def test_start_of_an_id_gce_could_not_name_is_refused(
    server: FakeGceServer, cloud: GceProvider
) -> None:
    launch(cloud)
    error = refused(cloud, 'x") OR (name != "y')  # never reaches a filter as written
    assert (error.error_class, error.code) == (C.INVALID_CONFIG, "InstanceNotFound")
    (listing,) = [r for r in server.state.requests if "aggregated" in r.path]
    assert listing.query["filter"] == '(labels.managed-by = "corral-contract")'


def test_a_failed_listing_refuses_the_start_classified(
    server: FakeGceServer, cloud: GceProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = launch(cloud)
    cloud.stop([name])

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise exceptions.Forbidden("no compute.instances.list", errors=[{"reason": "forbidden"}])

    monkeypatch.setattr(cloud._clients()[0], "aggregated_list", forbidden)
    assert refused(cloud, name).error_class is C.PERMISSION
