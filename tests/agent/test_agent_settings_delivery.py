"""A pool's agent settings reach the agent only the way they would on a cloud: the cluster
config is loaded with the deployment's defaults, the EC2 provider scale_up uses launches an
instance (in moto) and the user data EC2 kept is read back, the script runs (dry, in a scratch
root), and the agent.yaml it wrote is read by the agent's own config loader."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from unittest import mock

import boto3
from moto import mock_aws

from agent_runtime.config import AgentConfig, ImageMap, load_config
from corral.adapters.aws.ec2_params import render_user_data
from corral.adapters.aws.ec2_provider import Ec2Provider
from corral.adapters.gcp.gce_params import render_startup_script
from corral.domain.config import AwsProvider, GcpProvider, defaults_from_env, load_cluster_config
from corral.ports.cloud import LaunchRequest
from tests.bootstrap_runner import run_bootstrap

CLUSTER = """
task_container_defaults:
  image: {cpu: "python:3.12-slim", gpu: "nvcr.io/nvidia/pytorch:24.10-py3"}
resource_pools:
  - name: gpus
    provider:
      type: aws
      region: us-east-1
      image_id: IMAGE
      instance_type: g5.xlarge
      spot: true
      agent_settings:
        http_proxy: http://proxy.corp.example:3128
        https_proxy: http://proxy.corp.example:3128
        no_proxy: .corp.example,10.0.0.0/8
        run_as_uid: 1001
        run_as_gid: 1002
        stop_grace_period: 45s
        interruption_margin: 15
        rebalance_action: ignore
    task_container_defaults:
      registry_auth: {username: robot, password: s3cret, serveraddress: registry.corp.example}
  - name: gcp
    provider:
      type: gcp
      project: my-project-1
      zone: us-central1-a
      boot_disk_source_image: projects/my-project-1/global/images/agent
      network_tags: [corral-agent]
      service_account: {email: corral-agent@my-project-1.iam.gserviceaccount.com}
      instance_type: {machine_type: n1-standard-8, gpu_type: nvidia-tesla-t4, gpu_num: 1}
      agent_settings: {https_proxy: "https://proxy.corp.example:3129", run_as_uid: 0,
                       agent_wheel_url: "https://cp.example.com/corral-1.0-py3-none-any.whl"}
"""
# What the stack passes every function (infra/template.yaml's globals).
DEPLOYMENT = {
    "CORRAL_AGENT_INSTANCE_PROFILE_ARN": "arn:aws:iam::123456789012:instance-profile/corral-agent",
    "CORRAL_AGENT_METRICS_NAMESPACE": "Corral/Agents",
}


def _agent_config(script: str, root: Path, installs: str | None = None) -> AgentConfig:
    done = run_bootstrap(script, root)
    assert done.returncode == 0, done.stderr.decode()
    if installs is not None:  # the bootstrap installs the agent from the pool's wheel
        assert f"pip install --quiet corral[agent] @ {installs}" in done.stdout.decode()
    return load_config(root / "etc/corral/agent.yaml", environ={})


def _launched_user_data(cluster: str, pool_name: str) -> str:
    """Launch one instance of ``pool_name`` as scale_up does, in moto; the user data EC2 keeps."""
    env = {
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    with mock.patch.dict(os.environ, env), mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        iam = boto3.client("iam", region_name="us-east-1")
        iam.create_instance_profile(InstanceProfileName="corral-agent")  # the stack's
        image = ec2.register_image(Name="agent", RootDeviceName="/dev/xvda")["ImageId"]
        text = cluster.replace("IMAGE", image)
        loaded = load_cluster_config(text, defaults_from_env(DEPLOYMENT))
        pool = loaded.config.pool(pool_name)
        assert isinstance(pool.provider, AwsProvider)
        provider = Ec2Provider(
            {pool_name: pool.provider}, client=ec2, api_url="https://api.example.com"
        )
        offering = pool.offerings()[0]
        launched = provider.launch(LaunchRequest("rec-1", pool_name, offering, "rec-1-a0"))
        assert launched.cloud_id is not None
        # The instance carries the stack's instance profile the pool left out (it signs with it).
        (reservation,) = ec2.describe_instances(InstanceIds=[launched.cloud_id])["Reservations"]
        profile = reservation["Instances"][0]["IamInstanceProfile"]["Arn"]
        assert profile == DEPLOYMENT["CORRAL_AGENT_INSTANCE_PROFILE_ARN"]
        found = ec2.describe_instance_attribute(InstanceId=launched.cloud_id, Attribute="userData")
        return base64.b64decode(found["UserData"]["Value"]).decode()


def test_aws_pool_settings_reach_the_agents_parsed_config(tmp_path: Path) -> None:
    script = _launched_user_data(CLUSTER, "gpus")

    config = _agent_config(script, tmp_path)

    assert config.http_proxy == config.https_proxy == "http://proxy.corp.example:3128"
    assert config.no_proxy == ".corp.example,10.0.0.0/8"
    assert (config.run_as_uid, config.run_as_gid) == (1001, 1002)
    assert config.default_trial_image == ImageMap(
        cpu="python:3.12-slim", gpu="nvcr.io/nvidia/pytorch:24.10-py3"
    )
    assert config.cloudwatch_metrics_namespace == "Corral/Agents"  # the deployment's
    assert config.stop_grace_s == 45.0 and config.interruption_margin_s == 15.0
    assert config.rebalance_action == "ignore"
    assert config.registry_auth is not None
    assert config.registry_auth.docker_auth() == {
        "username": "robot",
        "password": "s3cret",
        "serveraddress": "registry.corp.example",
    }
    assert "s3cret" not in repr(config)  # a logged config never shows it
    assert config.pool == "gpus" and config.auth == "aws"


def test_unset_settings_leave_the_agents_defaults(tmp_path: Path) -> None:
    loaded = load_cluster_config(CLUSTER.replace("IMAGE", "ami-0123456789abcdef0"))
    pool = loaded.config.pool("gcp")
    assert isinstance(pool.provider, GcpProvider)
    request = LaunchRequest("rec-2", "gcp", pool.offerings()[0], "rec-2-a0")
    script = render_startup_script(pool.provider, request, "https://api.example.com")

    config = _agent_config(script, tmp_path, "https://cp.example.com/corral-1.0-py3-none-any.whl")

    assert config.https_proxy == "https://proxy.corp.example:3129" and config.http_proxy is None
    assert config.run_as_uid == 0 and config.run_as_gid is None
    assert config.default_trial_image == ImageMap(
        cpu="python:3.12-slim", gpu="nvcr.io/nvidia/pytorch:24.10-py3"
    )
    assert config.cloudwatch_metrics_namespace is None
    assert config.stop_grace_s == 30.0 and config.rebalance_action == "drain"
    assert config.registry_auth is None


def test_determined_agent_config_file_contents_map_to_agent_settings(tmp_path: Path) -> None:
    master = """
resource_pools:
  - pool_name: a
    provider:
      type: aws
      region: us-east-1
      image_id: ami-0123456789abcdef0
      iam_instance_profile_arn: arn:aws:iam::123456789012:instance-profile/corral-agent
      instance_type: g5.xlarge
      agent_config_file_contents:
        http_proxy: http://proxy:3128
        no_proxy: localhost
        agent_reconnect_attempts: 9
        visible_gpus: "0,1"
        hooks: {on_connection_lost: ["shutdown", "now"]}
"""
    loaded = load_cluster_config(master)
    at = "resource_pools[0].provider.agent_config_file_contents"
    assert [w for w in loaded.warnings if w.startswith(at)] == [
        f"{at}.http_proxy: read as resource_pools[0].provider.agent_settings.http_proxy",
        f"{at}.no_proxy: read as resource_pools[0].provider.agent_settings.no_proxy",
        f"{at}.agent_reconnect_attempts: read as "
        "resource_pools[0].provider.agent_reconnect_attempts",
        f"{at}.visible_gpus: ignored (Determined agent setting with no Corral equivalent)",
        f"{at}.hooks: ignored (Corral's dead man's switch shuts an instance down after "
        "dead_man_switch_s without the control plane)",
    ]
    pool = loaded.config.pool("a")
    assert isinstance(pool.provider, AwsProvider)
    request = LaunchRequest("rec-3", "a", pool.offerings()[0], "rec-3-a0")
    config = _agent_config(render_user_data(pool.provider, request, "https://api"), tmp_path)
    assert config.http_proxy == "http://proxy:3128" and config.no_proxy == "localhost"
    assert config.agent_reconnect_attempts == 9
