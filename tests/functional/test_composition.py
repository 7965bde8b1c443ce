"""composition.context_from_env: where the cluster config comes from, and what it refuses."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from corral.adapters.aws.dynamo_store import DynamoStore
from corral.adapters.aws.ec2_provider import Ec2Provider
from corral.adapters.aws.sqs_queue import SqsQueue
from corral.handlers.aws import composition
from tests.functional.conftest import MOTO_ENV
from tests.moto_env import use_moto_env

YAML = """\
resource_pools:
  - name: gpu
    provider: {type: aws, region: us-east-1, image_id: ami-12345678, instance_type: g5.xlarge,
               tag_key: managed-by, tag_value: corral-x}
"""
GCP_YAML = """\
resource_pools:
  - name: tpu
    provider: {type: gcp, project: my-project-123, zone: us-central1-a,
               boot_disk_source_image: projects/my-project-123/global/images/agent,
               instance_type: {machine_type: n1-standard-8, gpu_type: nvidia-tesla-t4, gpu_num: 1}}
"""


@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    use_moto_env(monkeypatch, MOTO_ENV)
    with mock_aws():
        yield


def test_config_from_an_ssm_parameter_wires_the_aws_adapters(moto: None) -> None:
    boto3.client("ssm").put_parameter(Name="/corral/t/cluster", Value=YAML, Type="String")
    env = {composition.CONFIG_PARAMETER_ENV: "/corral/t/cluster"}

    ctx = composition.context_from_env(env)

    assert list(ctx.pools) == ["gpu"]
    assert ctx.default_pool == "gpu"
    assert isinstance(ctx.store, DynamoStore)
    assert isinstance(ctx.cloud, Ec2Provider)
    assert isinstance(ctx.queue, SqsQueue)


def test_the_trial_role_comes_from_the_stack(moto: None) -> None:
    env = {composition.CONFIG_ENV: YAML}
    assert composition.context_from_env(env).trial_role_arn is None
    role = "arn:aws:iam::123456789012:role/corral-TrialRole-ABC"
    env[composition.TRIAL_ROLE_ENV] = role
    assert composition.context_from_env(env).trial_role_arn == role


def test_inline_config_wins_and_ssm_is_not_read() -> None:
    def never(name: str) -> str:
        raise AssertionError(f"read {name}")

    env = {composition.CONFIG_ENV: YAML, composition.CONFIG_PARAMETER_ENV: "/unused"}
    config = composition.cluster_config(env, never)
    assert config.pool_names == ("gpu",)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "CORRAL_CLUSTER_CONFIG"),
        ({composition.CONFIG_ENV: "resource_pools: []"}, "is invalid"),
        (
            {composition.CONFIG_ENV: YAML, "CORRAL_TAG_KEY": "owner", "CORRAL_TAG_VALUE": "x"},
            "only allow owner=x",
        ),
        ({composition.CONFIG_ENV: GCP_YAML}, "is a gcp pool"),
    ],
)
def test_refuses_what_the_deployment_cannot_run(env: dict[str, str], message: str) -> None:
    with pytest.raises(composition.CompositionError, match=message):
        composition.context_from_env(env, read_parameter=lambda name: "")


def test_importing_a_handler_builds_nothing() -> None:
    # build_context is a cache: nothing may have been built by importing the handlers.
    from corral.handlers.aws import idle_reap, scale_up, schedule, spot_reconcile

    assert {idle_reap.__name__, scale_up.__name__, schedule.__name__, spot_reconcile.__name__}
    assert composition.build_context.cache_info().currsize == 0


def test_the_deployment_defaults_come_from_the_env_the_composition_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pool without a region takes the deployment's: the env handed to the composition,
    not whatever the process environment happens to hold."""
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    no_region = YAML.replace("region: us-east-1, ", "")
    env = {composition.CONFIG_ENV: no_region, "AWS_REGION": "eu-west-1"}
    config = composition.cluster_config(env, lambda name: "")
    (pool,) = config.resource_pools
    assert {o.location for o in pool.offerings()} == {"eu-west-1"}


def test_the_deployments_agent_settings_and_profile_reach_every_launch(moto: None) -> None:
    """CORRAL_AGENT_SETTINGS (how the local stack shortens the agent's timers) goes into the
    user data's agent config; CORRAL_AGENT_INSTANCE_PROFILE_ARN is attached to launches of
    pools that name no profile (without one the agent has nothing to sign with)."""
    import base64
    import json

    from corral.domain.offerings import CapacityType, Offering
    from corral.ports.cloud import LaunchRequest

    ec2 = boto3.client("ec2")
    image = ec2.register_image(Name="agent", RootDeviceName="/dev/sda1")["ImageId"]
    iam = boto3.client("iam")
    profile = iam.create_instance_profile(InstanceProfileName="agent")["InstanceProfile"]["Arn"]
    env = {
        composition.CONFIG_ENV: YAML.replace("ami-12345678", image),
        "CORRAL_API_URL": "https://api.example.com",
        composition.AGENT_SETTINGS_ENV: json.dumps({"executor": "process", "tick_s": 0.5}),
        "CORRAL_AGENT_INSTANCE_PROFILE_ARN": profile,  # filled into the pool at config load
    }
    ctx = composition.context_from_env(env)
    offering = Offering("g5.xlarge", "us-east-1", CapacityType.ON_DEMAND, 1, 1.0)
    request = LaunchRequest(pool="gpu", record_id="rec-1", token="tok-1", offering=offering)
    instance_id = ctx.cloud.launch(request).cloud_id

    described = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]
    assert described["Instances"][0]["IamInstanceProfile"]["Arn"] == profile
    data = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    script = base64.b64decode(data["UserData"]["Value"]).decode()
    config = json.loads(script.split("<<'CORRAL_CONFIG_EOF_0'\n", 1)[1].split("\nCORRAL_CONFIG")[0])
    assert (config["executor"], config["tick_s"], config["pool"]) == ("process", 0.5, "gpu")


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_bad_deployment_agent_settings_are_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(composition.CompositionError, match="CORRAL_AGENT_SETTINGS"):
        composition.agent_settings({composition.AGENT_SETTINGS_ENV: text})
