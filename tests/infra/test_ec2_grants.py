"""Every EC2 call Ec2Provider makes is granted to every function that calls it.

The provider runs under moto and each call it sends is recorded; the template's policies
must allow each one for the roles of the functions using that method. moto creates no spot
request behind a RunInstances spot instance, so one made with RequestSpotInstances is
pinned on the instance's description: terminate then sends its CancelSpotInstanceRequests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
from moto import mock_aws

from corral.adapters.aws import clients
from corral.adapters.aws.ec2_provider import Ec2Provider
from corral.adapters.aws.service_models import OPERATIONS
from corral.domain.config.aws import AwsProvider
from corral.domain.offerings import CapacityType, Offering
from corral.ports.cloud import LaunchRequest
from tests.infra import iam_rules

TEMPLATE = Path(__file__).resolve().parents[2] / "infra" / "template.yaml"
KEY, VALUE = "managed-by", "corral-test"
ENV = {
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}

# Which functions call each provider method (corral.services, through their handlers).
USED_BY = {
    "launch": {"ScaleUpRole"},
    "start": {"ScaleUpRole"},  # warm_start
    "stop": {"IdleReapRole", "SpotReconcileRole"},  # idle_reap parks, reconcile stops again
    # agents (api), idle_reap, reconcile, and warm_start giving an instance up (scale_up)
    "terminate": {"ApiRole", "IdleReapRole", "SpotReconcileRole", "ScaleUpRole"},
}


class Recorder:
    def __init__(self) -> None:
        self.ec2: Any = boto3.client("ec2", region_name="us-east-1")
        self.image = self.ec2.register_image(Name="agent", RootDeviceName="/dev/sda1")["ImageId"]
        block = AwsProvider.model_validate(
            {"type": "aws", "region": "us-east-1", "image_id": self.image, "spot": True}
            | {"tag_key": KEY, "tag_value": VALUE}
        )
        # The provider's client is made as deployed ones are: over the trimmed EC2 model.
        self.client: Any = clients.client("ec2", region_name="us-east-1")
        self.provider = Ec2Provider({"gpu": block}, client=self.client, api_url="https://a")
        self.sent: set[str] = set()
        self.client.meta.events.register("before-call.ec2", self._record)

    def _record(self, model: Any, **_: Any) -> None:
        self.sent.add(f"ec2:{model.name}")

    def calls(self, run: Callable[[], object]) -> set[str]:
        self.sent.clear()
        run()
        return set(self.sent)

    def pin_spot_request(self, cloud_id: str) -> None:
        tags = [{"Key": KEY, "Value": VALUE}, {"Key": "corral-pool", "Value": "gpu"}]
        request = self.ec2.request_spot_instances(
            InstanceCount=1,
            Type="persistent",
            LaunchSpecification={"ImageId": self.image, "InstanceType": "g5.xlarge"},
            TagSpecifications=[{"ResourceType": "spot-instances-request", "Tags": tags}],
        )["SpotInstanceRequests"][0]["SpotInstanceRequestId"]

        def pin(parsed: dict[str, Any], **_: Any) -> None:
            for reservation in parsed.get("Reservations", ()):
                for instance in reservation["Instances"]:
                    if instance["InstanceId"] == cloud_id:
                        instance["SpotInstanceRequestId"] = request

        self.client.meta.events.register("after-call.ec2.DescribeInstances", pin)


@pytest.fixture(scope="module")
def calls() -> Iterator[dict[str, set[str]]]:
    with mock.patch.dict(os.environ, ENV), mock_aws():
        rec = Recorder()
        offering = Offering("g5.xlarge", "us-east-1", CapacityType.SPOT, 1, 0.4)
        request = LaunchRequest("rec-1", "gpu", offering, "rec-1-a0", stoppable=True)
        found: dict[str, set[str]] = {"launch": rec.calls(lambda: rec.provider.launch(request))}
        owned: list[Any] = []
        found["list_owned"] = rec.calls(lambda: owned.extend(rec.provider.list_owned()))
        (instance,) = owned
        cloud_id = instance.cloud_id
        found["stop"] = rec.calls(lambda: rec.provider.stop([cloud_id]))
        found["start"] = rec.calls(lambda: rec.provider.start(cloud_id, "rec-1-a1"))
        rec.pin_spot_request(cloud_id)
        found["list_spot_requests"] = rec.calls(rec.provider.list_spot_requests)
        found["terminate"] = rec.calls(lambda: rec.provider.terminate([cloud_id]))
        yield found


def test_the_recording_sees_each_methods_calls(calls: dict[str, set[str]]) -> None:
    assert calls["stop"] == {"ec2:DescribeInstances", "ec2:StopInstances"}
    assert calls["start"] == {"ec2:DescribeInstances", "ec2:StartInstances"}
    assert "ec2:CancelSpotInstanceRequests" in calls["terminate"]


def test_every_call_is_in_the_trimmed_ec2_model(calls: dict[str, set[str]]) -> None:
    sent = set().union(*calls.values())

    assert sent <= {f"ec2:{operation}" for operation in OPERATIONS["ec2"]}
    assert {"ec2:RunInstances", "ec2:DescribeSpotInstanceRequests"} <= sent


@pytest.mark.parametrize("method", sorted(USED_BY))
def test_every_call_is_granted_to_every_function_using_it(
    calls: dict[str, set[str]], method: str
) -> None:
    policies = iam_rules.statements(iam_rules.load_template(TEMPLATE.read_text()))
    for role in sorted(USED_BY[method]):
        granted = {
            a
            for s in policies[role]
            if s.effect == "Allow"
            for a in s.actions
            if isinstance(a, str)
        }
        assert calls[method] <= granted, (role, sorted(calls[method] - granted))
