"""The instances.insert body: labels, metadata, scheduling, accelerators, base_config merge,
names and requestId (pure functions, no client)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from corral.adapters.gcp import gce_params
from corral.domain.config.gcp import GcpProvider
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.offerings import CapacityType, Offering
from corral.ports.cloud import LaunchRequest

ZONE = "us-central1-a"


def block(**changes: Any) -> GcpProvider:
    base: dict[str, Any] = {
        "type": "gcp",
        "project": "my-project-1",
        "zone": [ZONE, "us-central1-b"],
        "boot_disk_source_image": "projects/p/global/images/agent",
        "instance_type": {
            "machine_type": "n1-standard-8",
            "gpu_type": "nvidia-tesla-t4",
            "gpu_num": 2,
        },
        "label_key": "managed-by",
        "label_value": "corral",
        "labels": {"team": "ml"},
        "master_url": "https://corral.example.com",
    }
    return GcpProvider.model_validate(base | changes)


def request(provider: GcpProvider, spot: bool = False, record: str = "inst-00ab") -> LaunchRequest:
    wanted = CapacityType.SPOT if spot else CapacityType.ON_DEMAND
    offering = next(
        o for o in provider.offerings() if o.capacity_type is wanted and o.location == ZONE
    )
    return LaunchRequest(record, "gpu", offering, f"{record}-a1")


def body(provider: GcpProvider, spot: bool = False, **kw: Any) -> dict[str, Any]:
    return gce_params.insert_body(provider, request(provider, spot, **kw), "#!/bin/bash\necho hi\n")


def test_request_id_is_a_uuid_derived_from_the_token() -> None:
    first = gce_params.request_id("inst-1-a0")
    assert uuid.UUID(first).version == 5
    assert gce_params.request_id("inst-1-a0") == first
    assert gce_params.request_id("inst-1-a1") != first


def test_name_labels_and_startup_script() -> None:
    made = body(block())
    assert made["name"] == "corral-agent-inst-00ab"
    assert made["labels"] == {
        "team": "ml",
        "managed-by": "corral",
        "corral-pool": "gpu",
        "corral-record": "inst-00ab",
    }
    assert made["metadata"]["items"] == [
        {"key": "startup-script", "value": "#!/bin/bash\necho hi\n"}
    ]
    assert made["machineType"] == f"zones/{ZONE}/machineTypes/n1-standard-8"
    boot = made["disks"][0]
    assert boot["boot"] and boot["autoDelete"]
    assert boot["initializeParams"]["sourceImage"] == "projects/p/global/images/agent"
    assert boot["initializeParams"]["diskSizeGb"] == "200"


def test_names_stay_valid_and_unique_for_awkward_record_ids() -> None:
    long_a = gce_params.instance_name("corral-agent", "X" * 80 + "a")
    long_b = gce_params.instance_name("corral-agent", "X" * 80 + "b")
    assert long_a != long_b
    for name in (
        long_a,
        gce_params.instance_name("p", "Inst_01"),
        gce_params.instance_name("p", "-"),
    ):
        assert len(name) <= 63 and name[0].isalpha() and name[-1].isalnum()
        assert all(c.islower() or c.isdigit() or c == "-" for c in name)


def test_on_demand_with_gpus_terminates_on_host_maintenance() -> None:
    made = body(block())
    assert made["scheduling"] == {"onHostMaintenance": "TERMINATE", "automaticRestart": True}
    assert made["guestAccelerators"] == [
        {"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 2}
    ]


def test_spot_is_a_spot_vm_deleted_on_preemption() -> None:
    made = body(block(spot=True), spot=True)
    assert made["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }


def test_legacy_preemptible_flag() -> None:
    provider = block(
        instance_type={
            "machine_type": "n1-standard-8",
            "gpu_type": "nvidia-tesla-t4",
            "gpu_num": 1,
            "preemptible": True,
        }
    )
    made = body(provider, spot=True)
    assert made["scheduling"] == {
        "preemptible": True,
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }


def test_built_in_gpus_get_no_accelerators() -> None:
    provider = block(instance_type={"machine_type": "a2-highgpu-1g"})
    made = body(provider)
    assert "guestAccelerators" not in made
    assert made["scheduling"]["onHostMaintenance"] == "TERMINATE"


def test_network_service_account_and_tags() -> None:
    provider = block(
        network_interface={
            "network": "global/networks/vpc",
            "subnetwork": "regions/us-central1/subnetworks/a",
            "external_ip": True,
        },
        network_tags=["corral-agent"],
        service_account={"email": "agent@my-project-1.iam.gserviceaccount.com"},
    )
    made = body(provider)
    assert made["networkInterfaces"] == [
        {
            "network": "global/networks/vpc",
            "subnetwork": "regions/us-central1/subnetworks/a",
            "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}],
        }
    ]
    assert made["tags"] == {"items": ["corral-agent"]}
    assert made["serviceAccounts"] == [
        {
            "email": "agent@my-project-1.iam.gserviceaccount.com",
            "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        }
    ]


def test_no_external_ip_and_default_service_account_by_default() -> None:
    made = body(block())
    assert made["networkInterfaces"] == [{"network": "global/networks/default"}]
    assert made["serviceAccounts"][0]["email"] == "default"


def test_base_config_is_merged_under_corrals_fields() -> None:
    data_disk = {
        "mode": "READ_ONLY",
        "boot": False,
        "source": f"zones/{ZONE}/disks/data",
        "autoDelete": False,
    }
    provider = block(
        base_config={
            "disks": [
                data_disk,
                {"boot": True, "initializeParams": {"diskType": "pd-ssd", "diskSizeGb": "10"}},
            ],
            "minCpuPlatform": "Intel Skylake",
            "labels": {"managed-by": "someone-else", "cost-center": "42"},
            "metadata": {
                "items": [
                    {"key": "startup-script", "value": "evil"},
                    {"key": "enable-oslogin", "value": "TRUE"},
                ]
            },
            "tags": {"items": ["ssh", "corral-agent"]},
            "scheduling": {"automaticRestart": False, "nodeAffinities": []},
        },
        network_tags=["corral-agent"],
    )
    made = body(provider)
    assert made["minCpuPlatform"] == "Intel Skylake"  # a key Corral never sets passes through
    assert made["labels"]["managed-by"] == "corral"  # ownership always wins
    assert made["labels"]["cost-center"] == "42"
    boot, attached = made["disks"]
    assert boot["boot"] and boot["initializeParams"]["diskType"] == "pd-ssd"
    assert boot["initializeParams"]["diskSizeGb"] == "200"  # boot_disk_size wins
    assert attached == data_disk
    items = {i["key"]: i["value"] for i in made["metadata"]["items"]}
    assert items == {"startup-script": "#!/bin/bash\necho hi\n", "enable-oslogin": "TRUE"}
    assert made["tags"] == {"items": ["ssh", "corral-agent"]}
    assert made["scheduling"]["automaticRestart"] is True  # Corral's scheduling wins
    assert made["scheduling"]["nodeAffinities"] == []
    assert provider.base_config["labels"]["managed-by"] == "someone-else"  # not mutated


def test_invalid_launches_fail_as_invalid_config() -> None:
    provider = block()
    wrong_zone = LaunchRequest(
        "inst-1",
        "gpu",
        Offering(
            "n1-standard-8+2xnvidia-tesla-t4", "europe-west4-a", CapacityType.ON_DEMAND, 2, 1.0
        ),
        "t",
    )
    with pytest.raises(LaunchError) as raised:
        gce_params.insert_body(provider, wrong_zone, "")
    assert raised.value.error_class is LaunchErrorClass.INVALID_CONFIG
    with pytest.raises(LaunchError) as raised:
        gce_params.insert_body(provider, request(provider), "x" * (256 * 1024 + 1))
    assert raised.value.code == "StartupScriptTooLarge"


def test_rendered_startup_script_uses_gce_identity() -> None:
    provider = block()
    script = gce_params.render_startup_script(provider, request(provider))
    assert '"auth": "gce"' in script and '"record_id": "inst-00ab"' in script
    assert "https://corral.example.com" in script
