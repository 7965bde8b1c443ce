"""The catalog's GPU counts agree with the published figures, and it knows every EC2 type
Determined's slot table does (so a Determined pool never needs ``instance_slots``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from corral.domain import catalog

SLOT_TABLE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "determined" / "ec2_instance_slots.yaml"
)

# GPUs per instance as AWS's "Accelerated computing instance types" page and Google's "GPU
# machine types" page list them, typed from those pages (not from the catalog): a type added to
# the catalog must be added here too.
AWS_PUBLISHED = {
    "p2": {"xlarge": 1, "8xlarge": 8, "16xlarge": 16},
    "p3": {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8},
    "p3dn": {"24xlarge": 8},
    "p4d": {"24xlarge": 8},
    "p4de": {"24xlarge": 8},
    "p5": {"4xlarge": 1, "48xlarge": 8},
    "p5e": {"48xlarge": 8},
    "p5en": {"48xlarge": 8},
    "p6-b200": {"48xlarge": 8},
    "g3s": {"xlarge": 1},
    "g3": {"4xlarge": 1, "8xlarge": 2, "16xlarge": 4},
    "g4dn": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1,
             "12xlarge": 4, "metal": 8},
    "g5": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1,
           "12xlarge": 4, "24xlarge": 4, "48xlarge": 8},
    "g5g": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 2, "metal": 2},
    "g6": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1,
           "12xlarge": 4, "24xlarge": 4, "48xlarge": 8},
    "gr6": {"4xlarge": 1, "8xlarge": 1},
    "g6e": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1,
            "12xlarge": 4, "24xlarge": 4, "48xlarge": 8},
}  # fmt: skip
GCP_PUBLISHED = {
    "a2-highgpu-1g": 1, "a2-highgpu-2g": 2, "a2-highgpu-4g": 4, "a2-highgpu-8g": 8,
    "a2-megagpu-16g": 16, "a2-ultragpu-1g": 1, "a2-ultragpu-2g": 2, "a2-ultragpu-4g": 4,
    "a2-ultragpu-8g": 8, "g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-12": 1,
    "g2-standard-16": 1, "g2-standard-24": 2, "g2-standard-32": 1, "g2-standard-48": 4,
    "g2-standard-96": 8, "g4-standard-48": 1, "g4-standard-96": 2, "g4-standard-192": 4,
    "g4-standard-384": 8, "a3-highgpu-1g": 1, "a3-highgpu-2g": 2, "a3-highgpu-4g": 4,
    "a3-highgpu-8g": 8, "a3-edgegpu-8g": 8, "a3-megagpu-8g": 8, "a3-ultragpu-8g": 8,
    "a4-highgpu-8g": 8, "a4x-highgpu-4g": 4,
}  # fmt: skip
# Current GPU families each cloud offers: the catalog must have at least one type of each.
AWS_CURRENT_FAMILIES = {"g4dn", "g5", "g5g", "g6", "g6e", "gr6", "p4d", "p4de", "p5", "p5e",
                        "p5en", "p6-b200"}  # fmt: skip
GCP_CURRENT_FAMILIES = {"a2-highgpu", "a2-megagpu", "a2-ultragpu", "g2-standard", "g4-standard",
                        "a3-highgpu", "a3-edgegpu", "a3-megagpu", "a3-ultragpu", "a4-highgpu",
                        "a4x-highgpu"}  # fmt: skip


def test_aws_gpu_counts_match_the_published_figures() -> None:
    published = {
        f"{family}.{size}": gpus
        for family, sizes in AWS_PUBLISHED.items()
        for size, gpus in sizes.items()
    }
    in_catalog = {t.name: t.gpus for t in catalog.AWS_INSTANCE_TYPES.values() if t.gpus}
    assert in_catalog == published
    assert {name.split(".")[0] for name in in_catalog} >= AWS_CURRENT_FAMILIES


def test_gcp_gpu_counts_match_the_published_figures() -> None:
    in_catalog = {t.name: t.gpus for t in catalog.GCP_MACHINE_TYPES.values() if t.gpus}
    assert in_catalog == GCP_PUBLISHED
    assert {name.rsplit("-", 1)[0] for name in in_catalog} >= GCP_CURRENT_FAMILIES


def test_every_type_in_determineds_slot_table_is_known_with_its_slots() -> None:
    table = yaml.safe_load(SLOT_TABLE.read_text())
    assert len(table) == 105
    wrong = {
        name: (slots, catalog.gpus_for("aws", name))
        for name, slots in table.items()
        if catalog.gpus_for("aws", name) != slots
    }
    assert wrong == {}


@pytest.mark.parametrize("entry", list(catalog.AWS_INSTANCE_TYPES.values()), ids=str)
def test_aws_rows_are_sane(entry: catalog.InstanceType) -> None:
    assert entry.vcpus >= 2 and entry.memory_gib > 0
    assert 0 < entry.spot_usd_per_hour < entry.on_demand_usd_per_hour
    assert (entry.gpus == 0) == (entry.gpu_model == "") == (entry.gpu_memory_gib == 0)


def test_cpu_types_of_zero_gpu_pools_on_both_clouds() -> None:
    assert catalog.lookup_aws("m5.xlarge") is not None
    assert catalog.gpus_for("aws", "m5.xlarge") == 0
    machine = catalog.lookup_gcp_machine("n2-standard-8")
    assert machine is not None and machine.gpus == 0
    custom = catalog.lookup_gcp_machine("custom-8-30720")
    assert custom is not None and (custom.vcpus, custom.memory_gib) == (8, 30.0)
    assert catalog.lookup_gcp_machine("custom-8") is None
    assert catalog.takes_attached_gpus("custom-8-30720-ext")
    assert not catalog.takes_attached_gpus("n2-standard-8")
