"""The GCE provider through google-cloud-compute against the fake REST server: the error
table, requestId idempotency, operation waits, and the request that reaches the wire."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from corral.adapters.gcp.gce_errors import classify
from corral.adapters.gcp.gce_params import request_id
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.offerings import CapacityType
from corral.ports.cloud import LaunchRequest

pytest.importorskip("google.cloud.compute_v1", reason="google-cloud-compute not installed")

from google.auth.credentials import AnonymousCredentials

from corral.adapters.gcp.gce_provider import GceProvider
from tests.contract.gce_harness import PROJECT, ZONE, gcp_block
from tests.fakes.gce_server import FakeGceServer, Fault

C = LaunchErrorClass


@pytest.fixture
def server() -> Iterator[FakeGceServer]:
    with FakeGceServer() as running:
        yield running


def provider(server: FakeGceServer, **changes: Any) -> GceProvider:
    return GceProvider(
        {"gpu": gcp_block(**changes)},  # type: ignore[dict-item]
        client_options={"api_endpoint": server.endpoint},
        credentials=AnonymousCredentials(),
        max_wait_s=5.0,
    )


def launch_request(record: str = "inst-1", attempt: int = 0, spot: bool = True) -> LaunchRequest:
    offering = next(
        o
        for o in gcp_block().offerings()  # type: ignore[attr-defined]
        if o.capacity_type is (CapacityType.SPOT if spot else CapacityType.ON_DEMAND)
    )
    return LaunchRequest(record, "gpu", offering, f"{record}-a{attempt}")


def test_the_insert_on_the_wire(server: FakeGceServer) -> None:
    result = provider(server).launch(launch_request())
    assert result.cloud_id == "corral-agent-inst-1"
    (insert,) = server.state.inserts()
    assert insert.path == f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances"
    assert insert.query["requestId"] == request_id("inst-1-a0")
    body = insert.body or {}
    assert body["labels"]["managed-by"] == "corral-contract"
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert body["guestAccelerators"][0]["acceleratorCount"] == 1
    assert body["metadata"]["items"][0]["key"] == "startup-script"


def test_the_same_token_never_launches_twice(server: FakeGceServer) -> None:
    cloud = provider(server)
    first = cloud.launch(launch_request())
    again = cloud.launch(launch_request())  # a redelivered message: same token
    assert first.cloud_id == again.cloud_id
    ids = {r.query["requestId"] for r in server.state.inserts()}
    assert len(ids) == 1 and len(server.state.instances) == 1


def test_a_later_attempt_finds_the_instance_an_earlier_one_made(server: FakeGceServer) -> None:
    cloud = provider(server)
    first = cloud.launch(launch_request(attempt=0))
    second = cloud.launch(launch_request(attempt=1))  # new token, same record: same name
    assert second.cloud_id == first.cloud_id
    assert len(server.state.instances) == 1


def test_a_name_taken_by_someone_else_is_invalid_config(server: FakeGceServer) -> None:
    server.state.add_instance(PROJECT, ZONE, "corral-agent-inst-1", {"owner": "bob"})
    with pytest.raises(LaunchError) as raised:
        provider(server).launch(launch_request())
    assert (raised.value.error_class, raised.value.code) == (C.INVALID_CONFIG, "InstanceNameTaken")


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (Fault(op_error_code="ZONE_RESOURCE_POOL_EXHAUSTED"), C.CAPACITY),
        (Fault(op_error_code="ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"), C.CAPACITY),
        (Fault(op_error_code="QUOTA_EXCEEDED"), C.QUOTA),
        (Fault(http_status=403, reason="quotaExceeded"), C.QUOTA),
        (Fault(http_status=403, reason="forbidden"), C.PERMISSION),
        (Fault(http_status=403, reason="rateLimitExceeded"), C.THROTTLED),
        (Fault(http_status=429, reason="tooManyRequests"), C.THROTTLED),
        (Fault(http_status=400, reason="invalid"), C.INVALID_CONFIG),
        (Fault(http_status=404, reason="notFound"), C.INVALID_CONFIG),
        (Fault(http_status=503, reason="backendError"), C.UNKNOWN),
    ],
)
def test_errors_are_classified(server: FakeGceServer, fault: Fault, expected: C) -> None:
    server.state.fail_next_insert(fault)
    with pytest.raises(LaunchError) as raised:
        provider(server).launch(launch_request())
    assert raised.value.error_class is expected
    assert raised.value.code == (fault.op_error_code or fault.reason)


def test_classify_falls_back_to_the_http_status() -> None:
    assert classify(["somethingNew"], 429) is C.THROTTLED
    assert classify([], 403) is C.PERMISSION
    assert classify([], 400) is C.INVALID_CONFIG
    assert classify([], 500) is C.UNKNOWN
    assert classify(["STOCKOUT"], 500) is C.CAPACITY
    assert classify(["resourceExhausted"]) is C.CAPACITY


def test_a_slow_operation_is_waited_for(server: FakeGceServer) -> None:
    server.state.slow_operations = 2
    result = provider(server).launch(launch_request())
    assert result.cloud_id == "corral-agent-inst-1"
    waits = [r for r in server.state.requests if r.path.endswith("/wait")]
    assert len(waits) == 2


def test_an_operation_past_the_wait_is_still_a_launch(server: FakeGceServer) -> None:
    server.state.slow_operations = 1000
    cloud = provider(server)
    cloud._max_wait_s = 0.0
    assert cloud.launch(launch_request()).cloud_id == "corral-agent-inst-1"


def test_an_unknown_base_config_field_is_invalid_config(server: FakeGceServer) -> None:
    with pytest.raises(LaunchError) as raised:
        provider(server, base_config={"noSuchField": 1}).launch(launch_request())
    assert (raised.value.error_class, raised.value.code) == (C.INVALID_CONFIG, "BaseConfigInvalid")
    assert server.state.inserts() == []


def test_listing_maps_state_spot_and_zone(server: FakeGceServer) -> None:
    cloud = provider(server)
    cloud.launch(launch_request("inst-1", spot=True))
    cloud.launch(launch_request("inst-2", spot=False))
    server.state.instances[(PROJECT, ZONE, "corral-agent-inst-2")]["status"] = "TERMINATED"
    listed = {i.record_id: i for i in cloud.list_owned()}
    assert listed["inst-1"].is_spot and listed["inst-1"].state.value == "running"
    assert not listed["inst-2"].is_spot and listed["inst-2"].state.value == "stopped"
    assert listed["inst-1"].location == ZONE
    assert listed["inst-1"].instance_type == "n1-standard-8+1xnvidia-tesla-t4"
    assert listed["inst-1"].private_ip is not None


def test_listing_pages_through_many_instances(server: FakeGceServer, monkeypatch: Any) -> None:
    import corral.adapters.gcp.gce_provider as module

    monkeypatch.setattr(module, "PAGE_SIZE", 2)
    cloud = provider(server)
    for n in range(5):
        cloud.launch(launch_request(f"inst-{n}"))
    assert len(cloud.list_owned()) == 5
    pages = [r for r in server.state.requests if "aggregated" in r.path]
    assert len(pages) == 3


def test_spot_requests_do_not_exist_on_gce(server: FakeGceServer) -> None:
    cloud = provider(server)
    assert cloud.list_spot_requests() == []
    cloud.cancel_spot_requests(["anything"])
    assert server.state.requests == []
