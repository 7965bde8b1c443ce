"""task_container_defaults' GLOO and NCCL port ranges, from the cluster config (Corral's or a
Determined master.yaml) through the bootstrap's agent.yaml and the agent's config to the
trial's environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_runtime.config import load_config
from agent_runtime.trial_env import trial_env
from corral.adapters.aws.ec2_params import bootstrap_settings as ec2_settings
from corral.adapters.gcp.gce_params import bootstrap_settings as gce_settings
from corral.bootstrap import render_bootstrap
from corral.domain.config import AwsProvider, ConfigError, GcpProvider, load_cluster_config
from corral.ports.cloud import LaunchRequest
from corral.protocol.agent import TrialAssignment
from tests.agent.conftest import dev_config

AWS_PROVIDER = (
    "{type: aws, region: us-east-1, image_id: ami-0123456789abcdef0, "
    "instance_type: p3.8xlarge, master_url: 'https://cp.example.com'}"
)
GCP_PROVIDER = (
    "{type: gcp, project: my-project-1, zone: us-central1-a, boot_disk_source_image: agent-image, "
    "master_url: 'https://cp.example.com', "
    "instance_type: {machine_type: n1-standard-8, gpu_type: nvidia-tesla-t4, gpu_num: 2}}"
)

CORRAL_CONFIG = f"""
task_container_defaults:
  gloo_port_range: "30000-30100"
  nccl_port_range: "40000:40100"
resource_pools:
  - name: inherits
    provider: {AWS_PROVIDER}
  - name: own-nccl
    task_container_defaults: {{nccl_port_range: "45000:45050"}}
    provider: {AWS_PROVIDER}
  - name: gcp
    provider: {GCP_PROVIDER}
"""


def _agent_yaml(provider: AwsProvider | GcpProvider, pool: str) -> dict[str, object]:
    request = LaunchRequest("rec-1", pool, provider.offerings()[0], "rec-1-a0")
    if isinstance(provider, AwsProvider):
        settings = ec2_settings(provider, request)
    else:
        settings = gce_settings(provider, request)
    script = render_bootstrap(settings, 256_000)
    body = script.split("<<'CORRAL_CONFIG_EOF_0'\n", 1)[1].split("\nCORRAL_CONFIG_EOF_0", 1)[0]
    return dict(json.loads(body))


def test_pool_ranges_win_key_by_key_and_reach_agent_yaml() -> None:
    config = load_cluster_config(CORRAL_CONFIG).config
    written = {p.name: _agent_yaml(p.provider, p.name) for p in config.resource_pools}
    ranges = {
        name: (y.get("gloo_port_range"), y.get("nccl_port_range")) for name, y in written.items()
    }
    assert ranges == {
        "inherits": ("30000:30100", "40000:40100"),  # "LOW-HIGH" is stored as LOW:HIGH
        "own-nccl": ("30000:30100", "45000:45050"),
        "gcp": ("30000:30100", "40000:40100"),
    }


def test_unset_ranges_are_left_out_of_agent_yaml() -> None:
    config = load_cluster_config(f"resource_pools:\n  - name: a\n    provider: {AWS_PROVIDER}\n")
    written = _agent_yaml(config.config.resource_pools[0].provider, "a")
    assert "gloo_port_range" not in written and "nccl_port_range" not in written


def test_a_determined_master_yaml_keeps_the_ranges_and_ignores_the_rest() -> None:
    master = f"""
port: 8080
task_container_defaults:
  shm_size_bytes: 4294967296
  nccl_port_range: "40000:40100"
  gloo_port_range: "41000:41100"
resource_pools:
  - pool_name: a
    task_container_defaults: {{image: "x", gloo_port_range: ""}}
    provider: {AWS_PROVIDER}
"""
    loaded = load_cluster_config(master)
    provider = loaded.config.resource_pools[0].provider
    assert provider.task_defaults.nccl_port_range == "40000:40100"
    assert provider.task_defaults.gloo_port_range == "41000:41100"  # "" is unset: inherited
    warned = "\n".join(loaded.warnings)
    assert "task_container_defaults.shm_size_bytes: ignored" in warned
    assert "task_container_defaults.image" not in warned  # kept: the pool's default image
    assert provider.task_defaults.image == "x"
    assert "port_range: ignored" not in warned


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("80:90", "1024 <= LOW <= HIGH <= 65535"),
        ("5000:4000", "1024 <= LOW <= HIGH <= 65535"),
        ("40000:70000", "1024 <= LOW <= HIGH <= 65535"),
        ("40000", "must be a port range LOW:HIGH"),
        ("a:b", "must be a port range LOW:HIGH"),
    ],
)
def test_a_bad_range_is_reported_at_its_field(value: str, reason: str) -> None:
    text = f"""
task_container_defaults: {{nccl_port_range: "{value}"}}
resource_pools:
  - name: a
    task_container_defaults: {{gloo_port_range: "{value}"}}
    provider: {AWS_PROVIDER}
"""
    with pytest.raises(ConfigError) as caught:
        load_cluster_config(text)
    problems = {p.path: p.reason for p in caught.value.problems}
    assert set(problems) == {
        "task_container_defaults.nccl_port_range",
        "resource_pools[0].task_container_defaults.gloo_port_range",
    }
    assert all(reason in r for r in problems.values())


def test_a_corral_config_refuses_an_unknown_key_in_the_block() -> None:
    with pytest.raises(ConfigError, match=r"task_container_defaults\.nccl_ports"):
        load_cluster_config(
            "task_container_defaults: {nccl_ports: '40000:40100'}\n"
            f"resource_pools:\n  - name: a\n    provider: {AWS_PROVIDER}\n"
        )


def test_the_agent_reads_and_checks_the_ranges(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        json.dumps(
            {
                "api_url": "http://cp",
                "dev_token": "t",
                "dev_instance_id": "i-1",
                "gloo_port_range": "30000-30100",
                "nccl_port_range": "40000:40100",
            }
        )
    )
    config = load_config(path, {})
    assert (config.gloo_port_range, config.nccl_port_range) == ("30000:30100", "40000:40100")
    with pytest.raises(ValueError, match="nccl_port_range"):
        load_config(path, {"CORRAL_AGENT_NCCL_PORT_RANGE": "1:2"})


def _assignment(environment: dict[str, str] | None = None) -> TrialAssignment:
    return TrialAssignment.model_validate(
        {
            "trial_id": "t",
            "experiment_id": "e",
            "entrypoint": ["x"],
            "gpus": [0],
            "checkpoint": {"storage_uri": "s3://b/e/t"},
            "environment": environment or {},
        }
    )


def test_each_variable_comes_from_its_own_range(tmp_path: Path) -> None:
    """Determined's agent sets GLOO_PORT_RANGE from the NCCL range; here each has its own."""
    config = dev_config(
        gloo_port_range="30000:30100",
        nccl_port_range="40000:40100",
    )
    env = trial_env(
        _assignment(),
        agent_id="a",
        checkpoint_path=tmp_path,
        proxies={},
        in_container=True,
        gloo_port_range=config.gloo_port_range,
        nccl_port_range=config.nccl_port_range,
    )
    assert env["GLOO_PORT_RANGE"] == "30000:30100"
    assert env["NCCL_PORT_RANGE"] == "40000:40100"
    # An experiment may narrow a range (within what the firewall opens).
    narrowed = trial_env(
        _assignment({"NCCL_PORT_RANGE": "40000:40010"}),
        agent_id="a",
        checkpoint_path=tmp_path,
        proxies={},
        in_container=True,
        nccl_port_range="40000:40100",
    )
    assert narrowed["NCCL_PORT_RANGE"] == "40000:40010" and "GLOO_PORT_RANGE" not in narrowed


def test_launch_spec_passes_the_agents_ranges(tmp_path: Path) -> None:
    from agent_runtime.trials import launch_spec

    config = dev_config(
        work_dir=tmp_path,
        gloo_port_range="30000:30100",
    )
    spec = launch_spec(_assignment(), config, "a", in_container=False)
    assert spec.env["GLOO_PORT_RANGE"] == "30000:30100" and "NCCL_PORT_RANGE" not in spec.env
