"""Determined master.yaml files load as they are (tests/fixtures/determined, one per shape).

Each validates with warnings only; every warning names a field of the file and says what Corral
does with it. Fields Determined takes from the master's instance metadata come from the
deployment; values Determined reads differently are converted, and the Determined-only fields
Corral honours (log group, disk type, CPU slots) reach the launch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from corral.adapters.aws.ec2_params import bootstrap_settings
from corral.adapters.gcp.gce_params import corral_body
from corral.cli.main import app
from corral.domain.config import (
    AwsProvider,
    ConfigError,
    DeploymentDefaults,
    DeploymentValue,
    GcpProvider,
    LoadedConfig,
    defaults_from_env,
    load_cluster_config,
)
from corral.domain.offerings import CapacityType, Offering
from corral.handlers.config_source import parse_cluster_config
from corral.ports.cloud import LaunchRequest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "determined"
CONFIGS = sorted(p.name for p in FIXTURES.glob("*.yaml") if p.name != "ec2_instance_slots.yaml")
DEFAULTS = DeploymentDefaults(
    aws_region=DeploymentValue("us-east-1", "AWS_REGION"),
    gcp_project=DeploymentValue("demo-project-1", "GOOGLE_CLOUD_PROJECT"),
    gcp_zone=DeploymentValue("us-west1-b,us-west1-c", "CORRAL_ZONE"),
)
# Moved blocks: a warning about `resource_pools[0].provider.x` of a `provisioner:` file is
# spelled `provisioner.x`, the key as the user wrote it.
WARNING = re.compile(r"^(?P<path>[\w.\[\]]+): (?P<what>.+)$")


def load(name: str, defaults: DeploymentDefaults = DEFAULTS) -> LoadedConfig:
    return load_cluster_config(FIXTURES / name, defaults)


def raw(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((FIXTURES / name).read_text()))


def _exists(data: Any, path: str) -> bool:
    """The path names a key of the file, or a key the deployment fills in."""
    *parents, last = re.findall(r"[^.\[\]]+", path)
    # ...or the agents' identity settings (agent_identity.py), which Determined's files leave out.
    filled = {"region", "project", "zone", "on_demand_fallback", "iam_instance_profile_arn"}
    filled |= {"service_account", "email", "network_tags"}
    cur = data
    for part in parents:
        if part in filled:
            return True
        cur = cur[int(part)] if isinstance(cur, list) else cur.get(part)
    return isinstance(cur, dict) and (last in cur or last in filled)


def test_every_shape_is_covered() -> None:
    assert len(CONFIGS) == 10


@pytest.mark.parametrize("name", CONFIGS)
def test_loads_with_warnings_naming_a_field_and_what_corral_does(name: str) -> None:
    loaded = load(name)
    data = raw(name)
    assert loaded.config.resource_pools
    for warning in loaded.warnings:
        found = WARNING.match(warning)
        assert found is not None, warning
        assert _exists(data, found["path"]), warning
        assert len(found["what"]) > 20, warning  # a reason, not just "ignored"


def test_det_deploy_aws_render() -> None:
    loaded = load("aws_deploy_simple.yaml")
    config = loaded.config
    assert config.default_resource_pool == "compute-pool"
    aux, compute = (config.pool(n).provider for n in ("aux-pool", "compute-pool"))
    assert isinstance(aux, AwsProvider) and isinstance(compute, AwsProvider)
    assert (aux.region, aux.master_url, aux.spot_max_price) == ("us-east-1", None, None)
    assert aux.network_interface.subnet_id == ()  # `subnet_id:` with no value: unset
    assert (aux.log_group, aux.log_stream) == ("/determined/demo", "determined-agent")
    assert [(o.instance_type, o.slots) for o in config.pool("aux-pool").offerings()] == [
        ("m5.xlarge", 0)
    ]
    assert config.pool("aux-pool").offerings()[0].hourly_price > 0  # in the catalog
    assert [o.slots for o in config.pool("compute-pool").offerings()] == [8]
    assert (
        "resource_pools[0].provider.region: not set; using 'us-east-1', the deployment's "
        "region (AWS_REGION)"
    ) in loaded.warnings
    assert (
        "resource_pools[0].provider.master_url: 'http://local-ipv4:8080' names Determined's "
        "master by instance metadata (local-ipv4); Corral's agents use the deployment's own "
        "API URL instead (CORRAL_API_URL)"
    ) in loaded.warnings


def test_an_imported_spot_pool_keeps_determineds_no_fallback() -> None:
    loaded = load("aws_deploy_spot_tls.yaml")
    pool = loaded.config.pool("compute-pool")
    assert not pool.on_demand_fallback
    assert {o.capacity_type for o in pool.offerings()} == {CapacityType.SPOT}
    assert any(
        w.startswith("resource_pools[1].provider.on_demand_fallback: false")
        for w in loaded.warnings
    )
    # Opting in keeps Corral's fallback, without the warning.
    data = raw("aws_deploy_spot_tls.yaml")
    data["resource_pools"][1]["provider"]["on_demand_fallback"] = True
    opted = load_cluster_config(yaml.safe_dump(data), DEFAULTS)
    assert opted.config.pool("compute-pool").on_demand_fallback
    assert not any("resource_pools[1].provider.on_demand_fallback" in w for w in opted.warnings)


def test_a_corral_spot_pool_still_falls_back() -> None:
    text = yaml.safe_dump(
        {
            "resource_pools": [
                {
                    "name": "gpu",
                    "provider": {"type": "aws", "image_id": "ami-0123456789abcdef0", "spot": True},
                }
            ]
        }
    )
    loaded = load_cluster_config(text, DEFAULTS)
    assert loaded.config.pool("gpu").on_demand_fallback


def test_det_deploy_gcp_render() -> None:
    loaded = load("gcp_deploy.yaml")
    config = loaded.config
    assert config.default_resource_pool == "gpu-pool"  # default_gpu_resource_pool
    cpu = config.pool("cpu-pool")
    provider = cpu.provider
    assert isinstance(provider, GcpProvider)
    assert provider.project == "demo-project-1"
    assert provider.zone == ("us-west1-b", "us-west1-c")
    # gpu_num 0 with a gpu_type: no GPUs, named and priced as the bare machine.
    assert [(o.instance_type, o.slots) for o in cpu.offerings()][:1] == [("n1-standard-4", 0)]
    assert cpu.offerings()[0].hourly_price == pytest.approx(0.19)
    assert "resource_pools[1].provider.cpu_slots: ignored" in " ".join(loaded.warnings)


def test_custom_n1_machine_with_v100s_disk_type_and_cpu_slots() -> None:
    config = load("gcp_deploy_preemptible.yaml").config
    gpu = config.pool("gpu-pool")
    (offering, *_) = gpu.offerings()
    assert (offering.instance_type, offering.slots) == ("custom-8-30720+4xnvidia-tesla-v100", 4)
    assert offering.hourly_price > 4 * 0.74  # the machine part is priced too
    provider = gpu.provider
    assert isinstance(provider, GcpProvider)
    assert provider.boot_disk_type == "pd-ssd"
    cpu = config.pool("cpu-pool").provider
    assert isinstance(cpu, GcpProvider)
    assert cpu.boot_disk_type == "pd-standard"  # Determined's URL spelling, last part kept
    assert [o.slots for o in config.pool("cpu-pool").offerings()][:1] == [1]  # cpu_slots_allowed


def test_without_deployment_defaults_the_reason_is_given() -> None:
    with pytest.raises(ConfigError) as info:
        load("legacy_provisioner_aws.yaml", DeploymentDefaults())
    assert [str(p) for p in info.value.problems] == [
        "provisioner.region: required: Determined reads it from the master's instance "
        "metadata; Corral uses the deployment's region (AWS_REGION), and none is known here"
    ]
    with pytest.raises(ConfigError) as info:
        load("gcp_deploy.yaml", DeploymentDefaults())
    paths = [p.path for p in info.value.problems]
    assert paths == [
        f"resource_pools[{i}].provider.{f}" for i in (0, 1) for f in ("project", "zone")
    ]
    assert all("Determined" in p.reason for p in info.value.problems)


def test_empty_strings_mean_unset_as_in_determined() -> None:
    data = raw("docs_aws_spot.yaml")
    provider = data["resource_pools"][0]["provider"]
    provider |= {"spot_max_price": "", "iam_instance_profile_arn": "", "region": ""}
    config = load_cluster_config(yaml.safe_dump(data), DEFAULTS).config
    aws = config.pool("spot-gpu").provider
    assert isinstance(aws, AwsProvider)
    assert (aws.spot_max_price, aws.iam_instance_profile_arn, aws.region) == (
        None,
        None,
        "us-east-1",
    )


def test_defaults_from_env_and_options() -> None:
    env = {"AWS_DEFAULT_REGION": "eu-west-1", "AWS_REGION": "us-east-2", "CORRAL_ZONE": " "}
    found = defaults_from_env(env, {"gcp_project": "opt-project"})
    assert found.aws_region == DeploymentValue("us-east-2", "AWS_REGION")
    assert found.gcp_project == DeploymentValue("opt-project", "--project")
    assert found.gcp_zone is None
    assert defaults_from_env({"AWS_DEFAULT_REGION": "eu-west-1"}).aws_region == DeploymentValue(
        "eu-west-1", "AWS_DEFAULT_REGION"
    )


def test_handler_takes_defaults_from_the_functions_environment() -> None:
    text = (FIXTURES / "legacy_provisioner_aws.yaml").read_text()
    config = parse_cluster_config(text, "the test", env={"AWS_REGION": "ap-northeast-1"})
    provider = config.default_pool.provider
    assert isinstance(provider, AwsProvider) and provider.region == "ap-northeast-1"


def test_cli_says_which_value_will_be_used() -> None:
    runner = CliRunner()
    path = str(FIXTURES / "legacy_provisioner_aws.yaml")
    unset = {"AWS_REGION": None, "AWS_DEFAULT_REGION": None}
    result = runner.invoke(
        app, ["config", "validate", path], env=unset | {"AWS_REGION": "us-west-2"}
    )
    assert result.exit_code == 0
    assert (
        "warning: provisioner.region: not set; using 'us-west-2', the deployment's region "
        "(AWS_REGION)"
    ) in result.stderr.splitlines()
    result = runner.invoke(app, ["config", "validate", path, "--region", "eu-west-1"], env=unset)
    assert "using 'eu-west-1', the deployment's region (--region)" in result.stderr
    result = runner.invoke(app, ["config", "validate", path], env=unset)
    assert result.exit_code == 2
    assert result.stderr.startswith("provisioner.region: required: Determined reads it")


def _request(offering: Offering) -> LaunchRequest:
    return LaunchRequest(record_id="r-1", pool="p", offering=offering, token="t")


def test_log_group_and_disk_type_reach_the_launch() -> None:
    config = load("aws_deploy_simple.yaml").config
    aws = config.pool("compute-pool").provider
    assert isinstance(aws, AwsProvider)
    offering = config.pool("compute-pool").offerings()[0]
    agent = bootstrap_settings(aws, _request(offering), "https://api.example.com").agent_config()
    assert agent["cloudwatch_log_group"] == "/determined/demo"
    assert agent["cloudwatch_log_stream"] == "determined-agent"
    assert agent["api_url"] == "https://api.example.com"  # not http://local-ipv4:8080
    gcp_pool = load("gcp_deploy_preemptible.yaml").config.pool("gpu-pool")
    gcp = gcp_pool.provider
    assert isinstance(gcp, GcpProvider)
    body = corral_body(gcp, _request(gcp_pool.offerings()[0]), "#!/bin/bash\n")
    disk = body["disks"][0]["initializeParams"]
    assert disk["diskType"] == "zones/us-west1-b/diskTypes/pd-ssd"
    assert body["guestAccelerators"][0]["acceleratorCount"] == 4
