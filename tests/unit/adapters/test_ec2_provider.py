"""Ec2Provider under moto: the exact RunInstances request, tags, ownership and terminate.

moto gaps covered here by other means (docs/testing.md): ClientToken is not idempotent and
spot requests fill at once (the token is asserted in the request, not by relaunching);
MaxResults paging is ignored (a Stubber serves two pages); errors never happen by
themselves (a ``before-call`` handler answers with an EC2 error instead of moto).
"""

from __future__ import annotations

import base64
import copy
import os
from collections.abc import Iterator
from typing import Any
from unittest import mock

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import EndpointConnectionError
from botocore.stub import ANY, Stubber
from moto import mock_aws

from corral.adapters.aws import ec2_provider
from corral.adapters.aws.ec2_params import USER_DATA_LIMIT
from corral.adapters.aws.ec2_provider import Ec2Provider
from corral.domain.config.aws import AwsProvider
from corral.domain.config.cluster import ClusterConfig
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.offerings import CapacityType, Offering
from corral.ports.cloud import CloudState, LaunchRequest, SpotRequestState
from tests.moto_images import register_image

KEY, VALUE = "managed-by", "corral-test"
API_URL = "https://api.corral.example.com"
PROFILE = "arn:aws:iam::123456789012:instance-profile/corral-agent"
ENV = {
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class Env:
    def __init__(self) -> None:
        self.ec2: Any = boto3.client("ec2", region_name="us-east-1")
        # moto checks that the agent's instance profile exists (as EC2 does).
        iam = boto3.client("iam", region_name="us-east-1")
        assert (
            iam.create_instance_profile(InstanceProfileName="corral-agent")["InstanceProfile"][
                "Arn"
            ]
            == PROFILE
        )
        subnets = self.ec2.describe_subnets()["Subnets"]
        self.subnets = [s["SubnetId"] for s in subnets[:2]]
        # The root device of the project's own Amazon Linux 2023 image (Ubuntu's is /dev/sda1).
        self.image = register_image(self.ec2, "agent", "/dev/xvda")
        self.sg = self.ec2.create_security_group(GroupName="corral", Description="agents")[
            "GroupId"
        ]
        common = {"type": "aws", "region": "us-east-1", "image_id": self.image}
        common |= {"tag_key": KEY, "tag_value": VALUE}
        self.gpu = AwsProvider.model_validate(
            common
            | {
                "instance_type": ["g5.xlarge", "g5.2xlarge"],
                "network_interface": {
                    "subnet_id": self.subnets,
                    "security_group_id": self.sg,
                    "public_ip": False,
                },
                "spot": True,
                "spot_max_price": "0.75",
                "ssh_key_name": "ops",
                "iam_instance_profile_arn": PROFILE,
                "root_volume_size": 300,
                "instance_name": "corral-gpu",
                "custom_tags": [
                    {"key": "team", "value": "ml"},
                    {"key": "corral-pool", "value": "x"},
                ],
                "master_url": "https://corral.example.com",
                "startup_script": "echo gpu-pool-ready",
            }
        )
        self.cpu = AwsProvider.model_validate(
            common | {"instance_type": ["m5.large"], "instance_slots": 0}
        )
        self.provider = Ec2Provider(
            {"gpu": self.gpu, "cpu": self.cpu}, client=self.ec2, api_url=API_URL
        )
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.ec2.meta.events.register("provide-client-params.ec2.*", self._capture)

    def _capture(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.sent.append((model.name, copy.deepcopy(params)))

    def calls(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.sent if name == operation]

    def launch(self, offering: Offering, record: str = "rec-1", pool: str = "gpu") -> str:
        result = self.provider.launch(LaunchRequest(record, pool, offering, f"{record}-a0"))
        assert result.cloud_id is not None
        return result.cloud_id

    def state(self, cloud_id: str) -> str:
        found = self.ec2.describe_instances(InstanceIds=[cloud_id])["Reservations"][0]
        return str(found["Instances"][0]["State"]["Name"])

    def foreign(self, tags: dict[str, str]) -> str:
        extra = {}
        if tags:
            pairs = [{"Key": k, "Value": v} for k, v in tags.items()]
            extra = {"TagSpecifications": [{"ResourceType": "instance", "Tags": pairs}]}
        found = self.ec2.run_instances(ImageId=self.image, MinCount=1, MaxCount=1, **extra)
        return str(found["Instances"][0]["InstanceId"])


@pytest.fixture
def env() -> Iterator[Env]:
    with mock.patch.dict(os.environ, ENV), mock_aws():
        yield Env()


def gpu(env: Env, capacity: CapacityType = CapacityType.ON_DEMAND, i: int = 0) -> Offering:
    return Offering(("g5.xlarge", "g5.2xlarge")[i], env.subnets[i], capacity, 1, 1.0)


def inject(client: Any, operation: str, code: str, times: int = 1) -> None:
    """The next ``times`` calls of ``operation`` fail with EC2 error ``code``."""
    left = [times]

    def handler(**_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if left[0] <= 0:
            return None
        left[0] -= 1
        error = {"Error": {"Code": code, "Message": f"injected {code}"}}
        return AWSResponse("https://ec2", 400, {}, None), error

    client.meta.events.register(f"before-call.ec2.{operation}", handler)


def tag_list(**tags: str) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


# ---- the RunInstances request --------------------------------------------------------------


def test_on_demand_run_instances_request_is_exact(env: Env) -> None:
    env.launch(gpu(env, i=1))
    (params,) = env.calls("RunInstances")
    user_data = params.pop("UserData")
    tags = tag_list(**{"team": "ml", "corral-pool": "gpu", KEY: VALUE, "corral-record": "rec-1"})
    tags.append({"Key": "Name", "Value": "corral-gpu"})
    assert params == {
        "ImageId": env.image,
        "InstanceType": "g5.2xlarge",
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": "rec-1-a0",
        "KeyName": "ops",
        "IamInstanceProfile": {"Arn": PROFILE},
        "NetworkInterfaces": [
            {
                "DeviceIndex": 0,
                "AssociatePublicIpAddress": False,
                "DeleteOnTermination": True,
                "SubnetId": env.subnets[1],
                "Groups": [env.sg],
            }
        ],
        "BlockDeviceMappings": [
            {
                "DeviceName": "/dev/xvda",
                "Ebs": {"VolumeSize": 300, "VolumeType": "gp3", "DeleteOnTermination": True},
            }
        ],
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpPutResponseHopLimit": 1,
            "HttpEndpoint": "enabled",
            "InstanceMetadataTags": "enabled",
        },
        "InstanceInitiatedShutdownBehavior": "terminate",
        "TagSpecifications": [
            {"ResourceType": t, "Tags": tags} for t in ("instance", "volume", "network-interface")
        ],
    }
    assert "rec-1" in user_data and "https://corral.example.com" in user_data


def test_root_volume_size_goes_to_the_images_own_root_device(env: Env) -> None:
    """/dev/sda1 on an AL2023 image would leave its root at the image's size and attach an
    unused 300 GB volume: the mapping names the device DescribeImages reports."""
    ubuntu = register_image(env.ec2, "ubuntu", "/dev/sda1")
    pools = {"al2023": env.gpu, "ubuntu": env.gpu.model_copy(update={"image_id": ubuntu})}
    provider = Ec2Provider(pools, client=env.ec2)

    for pool in ("al2023", "ubuntu"):
        provider.launch(LaunchRequest(f"rec-{pool}", pool, gpu(env), f"rec-{pool}-a0"))

    mappings = [p["BlockDeviceMappings"] for p in env.calls("RunInstances")]
    assert [[m["DeviceName"] for m in one] for one in mappings] == [["/dev/xvda"], ["/dev/sda1"]]
    assert all(one[0]["Ebs"]["VolumeSize"] == 300 for one in mappings)


def test_the_root_device_is_described_once_per_image_and_region(env: Env) -> None:
    for i in range(3):
        env.launch(gpu(env), f"rec-{i}")

    assert env.calls("DescribeImages") == [{"ImageIds": [env.image]}]
    assert len(env.calls("RunInstances")) == 3


def test_an_unknown_image_fails_the_record_before_run_instances(env: Env) -> None:
    missing = env.gpu.model_copy(update={"image_id": "ami-0123456789abcdef0"})
    provider = Ec2Provider({"gpu": missing}, client=env.ec2)

    with pytest.raises(LaunchError) as caught:
        provider.launch(LaunchRequest("rec-1", "gpu", gpu(env), "rec-1-a0"))

    assert caught.value.error_class is LaunchErrorClass.INVALID_CONFIG
    assert caught.value.code == "InvalidAMIID.NotFound"
    assert "ami-0123456789abcdef0" in str(caught.value)
    assert env.calls("RunInstances") == []


def test_a_refused_describe_is_classified_and_asked_again_next_launch(env: Env) -> None:
    inject(env.ec2, "DescribeImages", "UnauthorizedOperation")

    with pytest.raises(LaunchError) as caught:
        env.launch(gpu(env), "rec-1")
    env.launch(gpu(env), "rec-2")

    assert caught.value.error_class is LaunchErrorClass.PERMISSION
    assert len(env.calls("DescribeImages")) == 2
    (sent,) = env.calls("RunInstances")
    assert sent["BlockDeviceMappings"][0]["DeviceName"] == "/dev/xvda"


def test_spot_request_has_one_time_options_max_price_and_tagged_request(env: Env) -> None:
    cloud_id = env.launch(gpu(env, CapacityType.SPOT))
    (params,) = env.calls("RunInstances")
    assert params["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
            "MaxPrice": "0.75",
        },
    }
    kinds = [spec["ResourceType"] for spec in params["TagSpecifications"]]
    assert kinds == ["instance", "volume", "network-interface", "spot-instances-request"]
    (listed,) = env.provider.list_owned()
    assert (listed.cloud_id, listed.is_spot, listed.record_id) == (cloud_id, True, "rec-1")


def test_instance_and_root_volume_carry_the_tags_and_imdsv2_is_required(env: Env) -> None:
    cloud_id = env.launch(gpu(env))
    instance = env.ec2.describe_instances(InstanceIds=[cloud_id])["Reservations"][0]["Instances"][0]
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags == {KEY: VALUE, "corral-pool": "gpu", "corral-record": "rec-1"} | {
        "Name": "corral-gpu",
        "team": "ml",
    }
    assert instance["MetadataOptions"]["HttpTokens"] == "required"
    # One hop: a Docker bridge container (a hop more) cannot get an IMDSv2 token.
    assert instance["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert instance["MetadataOptions"]["InstanceMetadataTags"] == "enabled"
    attribute = env.ec2.describe_instance_attribute(
        InstanceId=cloud_id, Attribute="instanceInitiatedShutdownBehavior"
    )
    assert attribute["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    volumes = env.ec2.describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [cloud_id]}]
    )["Volumes"]
    (root,) = volumes
    assert (root["Size"], root["VolumeType"]) == (300, "gp3")
    assert {t["Key"]: t["Value"] for t in root["Tags"]}[KEY] == VALUE


def test_user_data_reaches_the_instance_and_stays_under_16_kb(env: Env) -> None:
    cloud_id = env.launch(gpu(env))
    encoded = env.ec2.describe_instance_attribute(InstanceId=cloud_id, Attribute="userData")
    raw = encoded["UserData"]["Value"]
    assert len(raw) < 16 * 1024
    script = base64.b64decode(raw).decode()
    assert script.startswith("#!/bin/bash") and '"record_id": "rec-1"' in script
    assert "echo gpu-pool-ready" in script and '"expected_gpus": 1' in script


def test_a_startup_script_too_large_for_user_data_fails_the_record(env: Env) -> None:
    huge = env.gpu.model_copy(update={"startup_script": "echo x\n" * 3000})
    provider = Ec2Provider({"gpu": huge}, client=env.ec2)
    with pytest.raises(LaunchError) as caught:
        provider.launch(LaunchRequest("rec-1", "gpu", gpu(env), "t"))
    assert (caught.value.error_class, caught.value.code) == (
        LaunchErrorClass.INVALID_CONFIG,
        "UserDataTooLarge",
    )
    assert env.calls("RunInstances") == []


def test_too_large_user_data_is_an_invalid_config_without_calling_ec2(env: Env) -> None:
    provider = Ec2Provider(
        {"gpu": env.gpu}, client=env.ec2, user_data=lambda _: "x" * (USER_DATA_LIMIT + 1)
    )
    with pytest.raises(LaunchError) as caught:
        provider.launch(LaunchRequest("rec-1", "gpu", gpu(env), "t"))
    assert caught.value.error_class is LaunchErrorClass.INVALID_CONFIG
    assert env.calls("RunInstances") == []


def test_several_subnets_and_types_per_pool_and_region_location(env: Env) -> None:
    a = env.launch(gpu(env, i=0), "rec-a")
    b = env.launch(gpu(env, i=1), "rec-b")
    c = env.launch(Offering("m5.large", "us-east-1", CapacityType.ON_DEMAND, 0, 0.1), "c", "cpu")
    listed = {i.cloud_id: i for i in env.provider.list_owned()}
    assert (listed[a].instance_type, listed[a].location) == ("g5.xlarge", env.subnets[0])
    assert (listed[b].instance_type, listed[b].location) == ("g5.2xlarge", env.subnets[1])
    assert (listed[c].pool, listed[c].location) == ("cpu", "us-east-1")
    assert "SubnetId" not in env.calls("RunInstances")[2]["NetworkInterfaces"][0]
    assert all(i.state in (CloudState.PENDING, CloudState.RUNNING) for i in listed.values())


@pytest.mark.parametrize(
    ("pool", "location", "code"),
    [("nope", "us-east-1", "UnknownPool"), ("gpu", "subnet-0000000f", "LocationNotInPool")],
)
def test_unknown_pool_or_location_fails_the_record(
    env: Env, pool: str, location: str, code: str
) -> None:
    offering = Offering("g5.xlarge", location, CapacityType.ON_DEMAND, 1, 1.0)
    with pytest.raises(LaunchError) as caught:
        env.provider.launch(LaunchRequest("r", pool, offering, "t"))
    assert (caught.value.error_class, caught.value.code) == (LaunchErrorClass.INVALID_CONFIG, code)


def test_long_tokens_become_a_deterministic_64_char_client_token(env: Env) -> None:
    token = "x" * 100
    for record in ("r1", "r2"):
        env.provider.launch(LaunchRequest(record, "gpu", gpu(env), token))
    first, second = (p["ClientToken"] for p in env.calls("RunInstances"))
    assert first == second and len(first) == 64


def test_a_config_with_cluster_config_keeps_aws_pools(env: Env) -> None:
    config = ClusterConfig.model_validate(
        {"resource_pools": [{"name": "gpu", "provider": env.gpu.model_dump(mode="json")}]}
    )
    provider = Ec2Provider(config, client=env.ec2)
    result = provider.launch(LaunchRequest("r", "gpu", gpu(env), "t"))
    assert [i.cloud_id for i in provider.list_owned()] == [result.cloud_id]


# ---- launch errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("InsufficientInstanceCapacity", LaunchErrorClass.CAPACITY),
        ("SpotMaxPriceTooLow", LaunchErrorClass.PRICE),
        ("VcpuLimitExceeded", LaunchErrorClass.QUOTA),
        ("UnauthorizedOperation", LaunchErrorClass.PERMISSION),
        ("InvalidAMIID.NotFound", LaunchErrorClass.INVALID_CONFIG),
        ("RequestLimitExceeded", LaunchErrorClass.THROTTLED),
        ("InternalError", LaunchErrorClass.UNKNOWN),
    ],
)
def test_client_errors_from_run_instances_become_classified_launch_errors(
    env: Env, code: str, expected: LaunchErrorClass
) -> None:
    inject(env.ec2, "RunInstances", code)
    with pytest.raises(LaunchError) as caught:
        env.launch(gpu(env, CapacityType.SPOT))
    assert (caught.value.error_class, caught.value.code) == (expected, code)
    assert f"injected {code}" in str(caught.value)
    assert env.provider.list_owned() == []


def test_a_connection_failure_is_unknown_and_retryable(env: Env) -> None:
    def fail(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")

    env.ec2.meta.events.register("before-call.ec2.RunInstances", fail)
    with pytest.raises(LaunchError) as caught:
        env.launch(gpu(env))
    assert caught.value.error_class is LaunchErrorClass.UNKNOWN


# ---- ownership: listing and terminating ------------------------------------------------------


def test_foreign_instances_are_never_listed_tagged_or_terminated(env: Env) -> None:
    foreign = [
        env.foreign({}),
        env.foreign({KEY: VALUE}),  # the pair but no pool tag: not Corral's
        env.foreign({KEY: "other", "corral-pool": "gpu"}),
    ]
    ours = env.launch(gpu(env))
    assert [i.cloud_id for i in env.provider.list_owned()] == [ours]
    env.sent.clear()
    env.provider.terminate([*foreign, ours])
    assert all(env.state(i) == "running" for i in foreign)
    assert env.state(ours) == "terminated"
    assert env.calls("CreateTags") == []
    assert [c["InstanceIds"] for c in env.calls("TerminateInstances")] == [[ours]]


def test_terminate_is_idempotent_batched_and_skips_unknown_ids(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ec2_provider, "TERMINATE_BATCH", 2)
    ids = [env.launch(gpu(env), f"r{i}") for i in range(3)]
    env.provider.terminate([*ids, "i-0123456789abcdef0"])
    assert sorted(len(c["InstanceIds"]) for c in env.calls("TerminateInstances")) == [1, 2]
    env.sent.clear()
    env.provider.terminate(ids)  # already terminated: nothing to do
    assert env.calls("TerminateInstances") == []
    listed = {i.cloud_id: i.state for i in env.provider.list_owned()}
    assert listed == dict.fromkeys(ids, CloudState.TERMINATED)


def test_an_instance_that_vanished_since_the_describe_is_skipped(env: Env) -> None:
    ids = [env.launch(gpu(env), f"r{i}") for i in range(2)]
    inject(env.ec2, "TerminateInstances", "InvalidInstanceID.NotFound")
    env.provider.terminate(ids)
    assert [env.state(i) for i in ids] == ["terminated", "terminated"]


def test_list_owned_uses_the_paginator_and_rechecks_tags_client_side() -> None:
    client: Any = boto3.client(
        "ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    block = AwsProvider(type="aws", region="us-east-1", image_id="ami-12345678",
                        tag_key=KEY, tag_value=VALUE)  # fmt: skip
    provider = Ec2Provider({"gpu": block}, client=client)

    def instance(cloud_id: str, **tags: str) -> dict[str, Any]:
        return {"InstanceId": cloud_id, "InstanceType": "g5.xlarge", "SubnetId": "subnet-1",
                "State": {"Name": "running"}, "Tags": tag_list(**tags)}  # fmt: skip

    ours = {KEY: VALUE, "corral-pool": "gpu"}
    expected = {"Filters": ANY, "MaxResults": 1000}
    with Stubber(client) as stub:
        page1 = [instance("i-00000001", **ours), instance("i-00000002", Name="not-ours")]
        stub.add_response("describe_instances", {"Reservations": [{"Instances": page1}],
                                                 "NextToken": "page2"}, expected)  # fmt: skip
        page2 = [instance("i-00000003", **ours, **{"corral-record": "r3"})]
        stub.add_response("describe_instances", {"Reservations": [{"Instances": page2}]},
                          {**expected, "NextToken": "page2"})  # fmt: skip
        listed = provider.list_owned()
        stub.assert_no_pending_responses()
    assert [(i.cloud_id, i.record_id, i.location) for i in listed] == [
        ("i-00000001", None, "us-east-1"),
        ("i-00000003", "r3", "us-east-1"),
    ]


# ---- spot requests ---------------------------------------------------------------------------


def spot_request(env: Env, tags: dict[str, str]) -> str:
    response = env.ec2.request_spot_instances(
        InstanceCount=1,
        Type="one-time",
        LaunchSpecification={"ImageId": env.image, "InstanceType": "g5.xlarge"},
        TagSpecifications=[{"ResourceType": "spot-instances-request", "Tags": tag_list(**tags)}],
    )
    return str(response["SpotInstanceRequests"][0]["SpotInstanceRequestId"])


def test_spot_requests_are_listed_and_cancelled_only_when_ours(env: Env) -> None:
    ours = spot_request(env, {KEY: VALUE, "corral-pool": "gpu", "corral-record": "rec-1"})
    foreign = spot_request(env, {KEY: "other", "corral-pool": "gpu"})
    (listed,) = env.provider.list_spot_requests()
    assert (listed.request_id, listed.pool, listed.record_id) == (ours, "gpu", "rec-1")
    assert (listed.state, listed.status_code) == (SpotRequestState.ACTIVE, "fulfilled")
    env.provider.cancel_spot_requests([ours, foreign, "sir-00000000"])
    env.provider.cancel_spot_requests([ours])  # idempotent: moto forgets cancelled requests
    cancelled = [c["SpotInstanceRequestIds"] for c in env.calls("CancelSpotInstanceRequests")]
    assert cancelled == [[ours]]
    remaining = env.ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
    assert [r["SpotInstanceRequestId"] for r in remaining] == [foreign]


def test_spot_listing_does_not_trust_the_server_tag_filter() -> None:
    client: Any = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x",
                               aws_secret_access_key="x")  # fmt: skip
    block = AwsProvider(type="aws", region="us-east-1", image_id="ami-12345678",
                        tag_key=KEY, tag_value=VALUE)  # fmt: skip
    provider = Ec2Provider({"gpu": block}, client=client)
    foreign = {"SpotInstanceRequestId": "sir-1", "State": "open", "Tags": tag_list(Name="x")}
    with Stubber(client) as stub:
        stub.add_response("describe_spot_instance_requests", {"SpotInstanceRequests": [foreign]})
        stub.add_response("describe_spot_instance_requests", {"SpotInstanceRequests": [foreign]})
        assert provider.list_spot_requests() == []
        provider.cancel_spot_requests(["sir-1"])  # no CancelSpotInstanceRequests stubbed
        stub.assert_no_pending_responses()


def test_importing_the_provider_does_not_import_boto3() -> None:
    import subprocess
    import sys

    code = "import sys, corral.adapters.aws.ec2_provider; print('boto3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


CPU_OFFERING = Offering("m5.large", "us-east-1", CapacityType.ON_DEMAND, 0, 0.1)


def test_agents_reach_the_deployments_api_unless_the_pool_names_one(env: Env) -> None:
    """The cpu pool has no master_url: its agents get the deployment's API URL."""
    import json

    from corral.domain.errors import LaunchError

    env.provider.launch(LaunchRequest("r-cpu", "cpu", CPU_OFFERING, "t-cpu"))
    (params,) = env.calls("RunInstances")
    assert json.dumps(API_URL) in params["UserData"]  # boto3 base64-encodes it after this
    bare = Ec2Provider({"cpu": env.cpu}, client=env.ec2)
    with pytest.raises(LaunchError) as refused:
        bare.launch(LaunchRequest("r2", "cpu", CPU_OFFERING, "t2"))
    assert refused.value.code == "NoApiUrl"
