"""Ec2Provider's warm pool: stoppable spot launches, stop, start, and terminate cancelling the
persistent spot request behind an instance.

Under moto where it is faithful; moto gaps, covered by a botocore Stubber instead:
- RunInstances with spot options creates no spot request and no ``SpotInstanceRequestId``
  (it ignores ``SpotOptions`` entirely), so terminate's cancel is checked on a Stubber;
- instances jump straight to ``stopped`` (never ``stopping``), and moto stops or starts any
  instance, even a terminated or one-time spot one (EC2 answers IncorrectInstanceState /
  UnsupportedOperation): those refusals are stubbed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from unittest import mock

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import ANY, Stubber
from moto import mock_aws

from corral.adapters.aws import ec2_provider
from corral.adapters.aws.ec2_errors import classify
from corral.adapters.aws.ec2_params import run_instances_params
from corral.adapters.aws.ec2_provider import Ec2Provider
from corral.adapters.memory import FakeClock
from corral.domain.config.aws import AwsProvider
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.offerings import CapacityType, Offering
from corral.ports.cloud import LaunchRequest, SpotRequestState

KEY, VALUE = "managed-by", "corral-test"
OURS = {KEY: VALUE, "corral-pool": "gpu"}
THEIRS = {KEY: "other", "corral-pool": "gpu"}
C = LaunchErrorClass
ENV = {
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def block(image: str = "ami-12345678", **extra: Any) -> AwsProvider:
    fields = {"type": "aws", "region": "us-east-1", "image_id": image}
    return AwsProvider.model_validate(fields | {"tag_key": KEY, "tag_value": VALUE} | extra)


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


SPOT = Offering("g5.xlarge", "us-east-1", CapacityType.SPOT, 1, 0.4)
ON_DEMAND = Offering("g5.xlarge", "us-east-1", CapacityType.ON_DEMAND, 1, 1.0)


# ---- the RunInstances request ----------------------------------------------------------------


def params(offering: Offering, stoppable: bool, **extra: Any) -> dict[str, Any]:
    request = LaunchRequest("rec-1", "gpu", offering, "rec-1-a0", stoppable=stoppable)
    return run_instances_params(block(**extra), request, "#!/bin/bash\n", "/dev/sda1")


def test_a_stoppable_spot_launch_asks_for_a_persistent_request_that_stops() -> None:
    sent = params(SPOT, stoppable=True, spot=True, spot_max_price="0.75")
    assert sent["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "persistent",
            "InstanceInterruptionBehavior": "stop",
            "MaxPrice": "0.75",
        },
    }
    # A shutdown from inside (the dead man's switch) stops it: terminated, the persistent
    # request would reopen and EC2 would launch another instance.
    assert sent["InstanceInitiatedShutdownBehavior"] == "stop"
    # Everything else is the launch it would be without a warm pool, token included.
    plain = params(SPOT, stoppable=False, spot=True, spot_max_price="0.75")
    assert plain["InstanceInitiatedShutdownBehavior"] == "terminate"
    differ = {"InstanceMarketOptions", "InstanceInitiatedShutdownBehavior"}
    assert {k: v for k, v in sent.items() if k not in differ} == {
        k: v for k, v in plain.items() if k not in differ
    }
    assert sent["ClientToken"] == "rec-1-a0"


def test_launches_without_a_warm_pool_stay_one_time_and_terminate() -> None:
    assert params(SPOT, stoppable=False)["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        },
    }
    # On demand, stoppable or not: the same request, no market options.
    assert params(ON_DEMAND, stoppable=True) == params(ON_DEMAND, stoppable=False)
    assert "InstanceMarketOptions" not in params(ON_DEMAND, stoppable=True)


# ---- under moto -------------------------------------------------------------------------------


class Env:
    def __init__(self) -> None:
        self.ec2: Any = boto3.client("ec2", region_name="us-east-1")
        self.image = self.ec2.register_image(Name="agent", RootDeviceName="/dev/sda1")["ImageId"]
        self.clock = FakeClock()
        self.provider = Ec2Provider(
            {"gpu": block(self.image)}, client=self.ec2, clock=self.clock, api_url="https://a"
        )
        self.sent: list[tuple[str, Any]] = []
        self.ec2.meta.events.register("provide-client-params.ec2.*", self._capture)

    def _capture(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.sent.append((model.name, params.get("InstanceIds")))

    def calls(self, operation: str) -> list[Any]:
        return [ids for name, ids in self.sent if name == operation]

    def launch(self, record: str, offering: Offering = ON_DEMAND) -> str:
        request = LaunchRequest(record, "gpu", offering, f"{record}-a0", stoppable=True)
        cloud_id = self.provider.launch(request).cloud_id
        assert cloud_id is not None
        return cloud_id

    def foreign(self, tags: dict[str, str]) -> str:
        spec = [{"ResourceType": "instance", "Tags": tag_list(tags)}]
        found = self.ec2.run_instances(
            ImageId=self.image, MinCount=1, MaxCount=1, TagSpecifications=spec
        )
        return str(found["Instances"][0]["InstanceId"])

    def state(self, cloud_id: str) -> str:
        found = self.ec2.describe_instances(InstanceIds=[cloud_id])["Reservations"][0]
        return str(found["Instances"][0]["State"]["Name"])


@pytest.fixture
def env() -> Iterator[Env]:
    with mock.patch.dict(os.environ, ENV), mock_aws():
        yield Env()


def inject(client: Any, operation: str, code: str) -> None:
    """Every call of ``operation`` fails with EC2 error ``code``."""

    def handler(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        error = {"Error": {"Code": code, "Message": f"injected {code}"}}
        return AWSResponse("https://ec2", 400, {}, None), error

    client.meta.events.register(f"before-call.ec2.{operation}", handler)


FOREIGN_TAGS = [
    {KEY: "another-cluster", "corral-pool": "gpu"},  # another cluster's pair
    {KEY: VALUE},  # our pair without a pool tag: not Corral's
    {KEY: VALUE, "corral-pool": "not-a-pool-here"},  # a pool this deployment does not know
]


def test_stop_skips_what_is_not_ours_unknown_or_gone(env: Env) -> None:
    foreign = [env.foreign(tags) for tags in FOREIGN_TAGS]
    gone = env.launch("rec-g")
    env.provider.terminate([gone])
    ours = env.launch("rec-w")
    env.sent.clear()
    assert env.provider.stop([*foreign, gone, "i-0123456789abcdef0", ours]) == {ours}
    assert env.calls("StopInstances") == [[ours]]
    assert [env.state(i) for i in foreign] == ["running"] * 3
    assert env.state(gone) == "terminated"  # moto would "stop" it if asked


def test_stop_is_batched_and_a_repeat_confirms_without_calling(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ec2_provider, "STOP_BATCH", 2)
    ids = [env.launch(f"rec-{i}") for i in range(3)]
    assert env.provider.stop(ids) == set(ids)
    assert sorted(len(c) for c in env.calls("StopInstances")) == [1, 2]
    env.sent.clear()
    assert env.provider.stop([*ids, *ids]) == set(ids)
    assert env.calls("StopInstances") == []
    assert env.provider.stop([]) == frozenset()


def test_start_of_a_stopped_instance_starts_it_at_the_providers_clock(env: Env) -> None:
    cloud_id = env.launch("rec-w", SPOT)
    env.provider.stop([cloud_id])
    env.clock.advance(600)
    result = env.provider.start(cloud_id, "rec-w-a1")
    assert (result.cloud_id, result.launched_at) == (cloud_id, env.clock.now())
    assert env.calls("StartInstances") == [[cloud_id]]
    assert env.state(cloud_id) in ("pending", "running")


def test_start_of_a_running_instance_confirms_it_without_calling(env: Env) -> None:
    cloud_id = env.launch("rec-w")
    assert env.provider.start(cloud_id, "rec-w-a0").cloud_id == cloud_id
    assert env.calls("StartInstances") == []


def test_start_refuses_foreign_unknown_and_unknown_pool_instances(env: Env) -> None:
    foreign = [env.foreign(tags) for tags in FOREIGN_TAGS]
    env.ec2.stop_instances(InstanceIds=foreign)
    for cloud_id in [*foreign, "i-0123456789abcdef0"]:
        with pytest.raises(LaunchError) as refused:
            env.provider.start(cloud_id, "t")
        assert (refused.value.error_class, refused.value.code) == (C.INVALID_CONFIG, "NotOurs")
    assert env.calls("StartInstances") == []
    assert [env.state(i) for i in foreign] == ["stopped"] * 3


def test_start_refuses_a_terminated_instance_without_calling(env: Env) -> None:
    cloud_id = env.launch("rec-g")
    env.provider.terminate([cloud_id])
    with pytest.raises(LaunchError) as refused:
        env.provider.start(cloud_id, "t")
    assert (refused.value.error_class, refused.value.code) == (
        C.INVALID_CONFIG,
        "InstanceTerminated",
    )
    assert env.calls("StartInstances") == []
    assert env.state(cloud_id) == "terminated"  # moto would bring it back if asked


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("InsufficientInstanceCapacity", C.CAPACITY),
        ("IncorrectInstanceState", C.THROTTLED),  # raced into stopping/terminated: look again
        ("IncorrectSpotRequestState", C.THROTTLED),  # the request still marked-for-stop
        ("RequestLimitExceeded", C.THROTTLED),
        ("UnsupportedOperation", C.INVALID_CONFIG),
        ("InvalidInstanceID.NotFound", C.INVALID_CONFIG),  # vanished since the describe
        ("UnauthorizedOperation", C.PERMISSION),
    ],
)
def test_start_instances_errors_are_classified_by_the_table(
    env: Env, code: str, expected: LaunchErrorClass
) -> None:
    cloud_id = env.launch("rec-w")
    env.provider.stop([cloud_id])
    inject(env.ec2, "StartInstances", code)
    with pytest.raises(LaunchError) as refused:
        env.provider.start(cloud_id, "t")
    assert (refused.value.error_class, refused.value.code) == (expected, code)
    assert env.state(cloud_id) == "stopped"


def test_a_connection_failure_during_start_is_unknown(env: Env) -> None:
    cloud_id = env.launch("rec-w")
    env.provider.stop([cloud_id])

    def fail(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")

    env.ec2.meta.events.register("before-call.ec2.StartInstances", fail)
    with pytest.raises(LaunchError) as refused:
        env.provider.start(cloud_id, "t")
    assert refused.value.error_class is C.UNKNOWN


def test_terminating_on_demand_instances_cancels_nothing(env: Env) -> None:
    ids = [env.launch("rec-1"), env.launch("rec-2")]
    env.provider.stop([ids[0]])
    env.sent.clear()
    assert env.provider.terminate(ids) == set(ids)
    assert env.calls("CancelSpotInstanceRequests") == []
    assert [env.state(i) for i in ids] == ["terminated", "terminated"]


def test_the_new_codes_are_in_the_one_table() -> None:
    assert classify("IncorrectInstanceState") is C.THROTTLED
    assert classify("IncorrectSpotRequestState") is C.THROTTLED
    assert classify("UnsupportedOperation") is C.INVALID_CONFIG
    assert classify("NotOurs") is C.INVALID_CONFIG
    assert classify("InstanceTerminated") is C.INVALID_CONFIG


# ---- stubbed: what moto does not model -----------------------------------------------------


@pytest.fixture
def stubbed() -> Iterator[tuple[Ec2Provider, Stubber]]:
    client: Any = boto3.client(
        "ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(client) as stub:
        yield Ec2Provider({"gpu": block()}, client=client), stub
        stub.assert_no_pending_responses()


def instance(cloud_id: str, state: str, tags: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"InstanceId": cloud_id, "State": {"Name": state}, "Tags": tag_list(tags), **extra}


def spot(cloud_id: str, state: str, request_id: str) -> dict[str, Any]:
    return instance(
        cloud_id, state, OURS, InstanceLifecycle="spot", SpotInstanceRequestId=request_id
    )


def describes(stub: Stubber, *instances: dict[str, Any]) -> None:
    page = {"Reservations": [{"Instances": list(instances)}]}
    stub.add_response("describe_instances", page, {"Filters": ANY, "MaxResults": 1000})


def test_terminate_cancels_the_spot_requests_of_our_instances_first(
    stubbed: tuple[Ec2Provider, Stubber],
) -> None:
    provider, stub = stubbed
    describes(
        stub,
        spot("i-00000001", "stopped", "sir-1"),  # a warm instance: its request is persistent
        spot("i-00000002", "running", "sir-2"),
        instance("i-00000003", "running", OURS),  # on demand: no request
        spot("i-00000004", "terminated", "sir-4"),  # already gone: nothing to do
        # The server filter let a foreign one through: neither it nor its request is touched.
        instance("i-00000005", "running", THEIRS, SpotInstanceRequestId="sir-5"),
    )
    stub.add_response(
        "cancel_spot_instance_requests",
        {"CancelledSpotInstanceRequests": []},
        {"SpotInstanceRequestIds": ["sir-1", "sir-2"]},
    )
    ours = ["i-00000001", "i-00000002", "i-00000003"]
    stub.add_response("terminate_instances", {"TerminatingInstances": []}, {"InstanceIds": ours})
    wanted = [*ours, "i-00000004", "i-00000005"]
    assert provider.terminate(wanted) == {*ours, "i-00000004"}


def test_a_request_already_gone_does_not_block_the_terminate(
    stubbed: tuple[Ec2Provider, Stubber],
) -> None:
    provider, stub = stubbed
    describes(stub, spot("i-00000001", "running", "sir-1"))
    for _ in range(2):  # the batch, then one by one
        stub.add_client_error(
            "cancel_spot_instance_requests", "InvalidSpotInstanceRequestID.NotFound"
        )
    stub.add_response("terminate_instances", {}, {"InstanceIds": ["i-00000001"]})
    assert provider.terminate(["i-00000001"]) == {"i-00000001"}


def test_no_terminate_while_the_request_could_not_be_cancelled(
    stubbed: tuple[Ec2Provider, Stubber],
) -> None:
    """Terminating anyway would reopen a persistent request: EC2 would launch a new one."""
    provider, stub = stubbed
    describes(stub, spot("i-00000001", "stopped", "sir-1"))
    stub.add_client_error("cancel_spot_instance_requests", "RequestLimitExceeded")
    with pytest.raises(ClientError):
        provider.terminate(["i-00000001"])  # no terminate_instances stubbed: none made


def test_stop_leaves_out_one_instance_ec2_refuses(
    stubbed: tuple[Ec2Provider, Stubber],
) -> None:
    provider, stub = stubbed
    describes(
        stub,
        instance("i-00000001", "running", OURS),
        spot("i-00000002", "running", "sir-2"),  # a one-time request's instance
        instance("i-00000003", "stopping", OURS),  # already on its way: confirmed, not sent
    )
    stub.add_client_error("stop_instances", "UnsupportedOperation")
    stub.add_response("stop_instances", {}, {"InstanceIds": ["i-00000001"]})
    stub.add_client_error("stop_instances", "UnsupportedOperation")
    wanted = ["i-00000001", "i-00000002", "i-00000003"]
    assert provider.stop(wanted) == {"i-00000001", "i-00000003"}


def test_stop_raises_what_it_cannot_attribute_to_one_instance(
    stubbed: tuple[Ec2Provider, Stubber],
) -> None:
    provider, stub = stubbed
    describes(stub, instance("i-00000001", "running", OURS))
    stub.add_client_error("stop_instances", "UnauthorizedOperation")
    with pytest.raises(ClientError):
        provider.stop(["i-00000001"])


def test_start_while_stopping_is_retried_soon(stubbed: tuple[Ec2Provider, Stubber]) -> None:
    provider, stub = stubbed
    describes(stub, instance("i-00000001", "stopping", OURS))
    with pytest.raises(LaunchError) as refused:
        provider.start("i-00000001", "t")  # no start_instances stubbed: none made
    assert (refused.value.error_class, refused.value.code) == (
        C.THROTTLED,
        "IncorrectInstanceState",
    )


def test_start_returns_the_spot_request_of_a_warm_spot_instance(
    stubbed: tuple[Ec2Provider, Stubber],
) -> None:
    provider, stub = stubbed
    describes(stub, spot("i-00000001", "stopped", "sir-1"))
    stub.add_response("start_instances", {}, {"InstanceIds": ["i-00000001"]})
    assert provider.start("i-00000001", "t").spot_request_id == "sir-1"


def test_a_throttled_describe_during_start_is_a_classified_launch_error(
    stubbed: tuple[Ec2Provider, Stubber],
) -> None:
    provider, stub = stubbed
    stub.add_client_error("describe_instances", "RequestLimitExceeded")
    with pytest.raises(LaunchError) as refused:
        provider.start("i-00000001", "t")
    assert refused.value.error_class is C.THROTTLED


def test_a_disabled_request_is_listed_active_never_open(
    stubbed: tuple[Ec2Provider, Stubber],
) -> None:
    """A persistent request whose instance we stopped is ``disabled``. Read as OPEN, the
    reconciler would cancel it as unclaimed, and EC2 terminates a stopped instance whose
    request is cancelled: the warm pool would lose it."""
    provider, stub = stubbed
    request = {
        "SpotInstanceRequestId": "sir-1",
        "State": "disabled",
        "Status": {"Code": "instance-stopped-by-user"},
        "InstanceId": "i-00000001",
        "Tags": tag_list(OURS),
    }
    stub.add_response("describe_spot_instance_requests", {"SpotInstanceRequests": [request]})
    (listed,) = provider.list_spot_requests()
    assert (listed.state, listed.instance_id) == (SpotRequestState.ACTIVE, "i-00000001")
