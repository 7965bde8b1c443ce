from __future__ import annotations

import pytest
from config_helpers import EXAMPLES, dump

from corral.domain.config import AwsProvider, ConfigError, GcpProvider, load_cluster_config

PROFILE = "arn:aws:iam::123456789012:instance-profile/corral-agent"

SEED_001_PROVISIONER = """\
provisioner:
  master_url: http://10.0.0.5:8080
  startup_script: echo hi
  agent_docker_network: pedl
  max_idle_agent_period: 5m

  provider: aws
  region: us-west-2
  root_volume_size: 200
  image_id: ami-0f4677bfc3161edc8
  tag_key: pedl-cluster
  tag_value: research
  instance_name: determined-ai-agent
  ssh_key_name: pedl-key
  iam_instance_profile_arn: arn:aws:iam::123456789012:instance-profile/pedl-agent
  network_interface:
    public_ip: true
    security_group_id: sg-0123456789abcdef0
    subnet_id: subnet-0123456789abcdef0
  instance_type: p3.8xlarge
  max_instances: 5
"""

SEED_002_GCP_DISK = """\
provider:
  startup_script: |
                  lsblk
                  mkdir -p /mnt/disks/second
                  mount -o discard,defaults /dev/sdb1 /mnt/disks/second
                  lsblk
  type: gcp
  project: my-project-1
  zone: us-central1-a
  base_config:
    disks:
      - mode: READ_ONLY
        boot: false
        source: zones/us-central1-a/disks/data
        autoDelete: false
  boot_disk_size: 200
  boot_disk_source_image: projects/my-project-1/global/images/det-agent
"""


def test_pedl_provisioner_becomes_pool_default() -> None:
    loaded = load_cluster_config(SEED_001_PROVISIONER)
    assert loaded.warnings == (
        "provisioner: read as resource pool 'default' (Determined spelling)",
    )
    pool = loaded.config.default_pool
    assert pool.name == "default"
    p = pool.provider
    assert isinstance(p, AwsProvider)
    assert p.agent_docker_network == "pedl"
    assert p.max_idle_agent_period == 300.0
    assert p.instance_type == ("p3.8xlarge",)
    assert p.network_interface.subnet_id == ("subnet-0123456789abcdef0",)
    assert [o.location for o in pool.offerings()] == ["subnet-0123456789abcdef0"]


def test_pedl_problems_are_reported_where_the_user_wrote_them() -> None:
    text = SEED_001_PROVISIONER.replace("region: us-west-2", "region: <region>")
    with pytest.raises(ConfigError) as info:
        load_cluster_config(text)
    assert str(info.value) == (
        "provisioner.region: must be an AWS region such as us-east-1, got '<region>'"
    )
    with pytest.raises(ConfigError) as info:
        load_cluster_config(text.replace("provider: aws", "provider: azure"))
    assert str(info.value) == "provisioner.provider: must be one of 'aws', 'gcp' (got 'azure')"


def test_seed_002_gcp_provider_block_loads() -> None:
    loaded = load_cluster_config(SEED_002_GCP_DISK)
    p = loaded.config.default_pool.provider
    assert isinstance(p, GcpProvider)
    assert p.base_config["disks"][0]["source"] == "zones/us-central1-a/disks/data"
    assert p.startup_script is not None and p.startup_script.startswith("lsblk\n")
    assert p.instance_type[0].gpu_type == "nvidia-tesla-v100"  # Determined's default shape
    with pytest.raises(ConfigError) as info:
        load_cluster_config(SEED_002_GCP_DISK.replace("boot_disk_size: 200", "boot_disk_size: 10"))
    assert str(info.value) == "provider.boot_disk_size: must be >= 100"


def test_provisioner_and_resource_pools_conflict() -> None:
    data = {"provisioner": {"provider": "aws"}, "resource_pools": []}
    with pytest.raises(ConfigError) as info:
        load_cluster_config(dump(data))
    assert [str(p) for p in info.value.problems] == [
        "provisioner: cannot be combined with resource_pools",
        "resource_pools: must not be empty",
    ]


def test_determined_master_example_loads_with_warnings() -> None:
    loaded = load_cluster_config(EXAMPLES / "determined-master.yaml")
    assert loaded.config.pool_names == ("default", "gcp-disk")
    assert loaded.config.default_resource_pool == "default"
    assert loaded.warnings == (
        "resource_manager.default_aux_resource_pool: ignored (Determined setting with no "
        "Corral equivalent)",
        "checkpoint_storage: ignored (set checkpoint_storage in each experiment config)",
        "db: ignored (Determined setting with no Corral equivalent)",
        "port: ignored (Determined setting with no Corral equivalent)",
        "resource_pools[1].provider.service_account.email: not set, so the project's default "
        "compute service account, and the deployment names no agent account "
        "(CORRAL_AGENT_SERVICE_ACCOUNT, --service-account): deploy.sh lets scale_up attach only "
        "corral-agent, and the API refuses agents of any account it was not given",
        "resource_pools[1].provider.network_tags: not set: the instances carry no network tag, "
        "so no firewall rule of infra/gcp/firewall.sh (tag corral-agent) reaches them and trials "
        "spanning instances hang; add the firewall's tag (or CORRAL_AGENT_NETWORK_TAG, "
        "--network-tag)",
    )
    gcp = loaded.config.pool("gcp-disk")
    assert [o.instance_type for o in gcp.offerings()] == ["n1-standard-8+2xnvidia-tesla-t4"]


def test_pedl_example_file_loads() -> None:
    loaded = load_cluster_config(EXAMPLES / "pedl-master.yaml")
    assert loaded.config.pool_names == ("default",)


def test_ignored_pool_and_provider_keys_warn() -> None:
    data = {
        "log": {"level": "info"},
        "resource_pools": [
            {
                "pool_name": "a",
                "scheduler": {"type": "priority"},
                "provider": {
                    "type": "aws",
                    "region": "us-east-1",
                    "image_id": "ami-0123456789abcdef0",
                    "instance_type": "g4dn.xlarge",
                    "iam_instance_profile_arn": PROFILE,
                    "master_cert_name": "x",
                    "launch_error_timeout": "5m",
                },
            }
        ],
    }
    loaded = load_cluster_config(dump(data))
    assert loaded.warnings == (
        "log: ignored (Determined setting with no Corral equivalent)",
        "resource_pools[0].scheduler: ignored (Corral's scheduler has no settings)",
        "resource_pools[0].provider.launch_error_timeout: ignored (Corral never leaves a pool "
        "stopped: launch errors back it off (30 min at most) and an open boot breaker lets a "
        "launch through after an hour)",
        "resource_pools[0].provider.master_cert_name: ignored (Determined setting with no "
        "Corral equivalent)",
    )
