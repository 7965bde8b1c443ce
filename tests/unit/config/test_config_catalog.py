from __future__ import annotations

import typing

import pytest

from corral.domain import catalog
from corral.domain.config import GpuType

AWS_TYPES = [
    "g4dn.xlarge",
    "g4dn.12xlarge",
    "g4dn.metal",
    "g5.xlarge",
    "g5.2xlarge",
    "g5.12xlarge",
    "g5.48xlarge",
    "g6.xlarge",
    "g6.12xlarge",
    "g6.48xlarge",
    "g6e.xlarge",
    "g6e.12xlarge",
    "p3.2xlarge",
    "p3.8xlarge",
    "p3.16xlarge",
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p2.xlarge",
    "p2.8xlarge",
    "p2.16xlarge",
]


@pytest.mark.parametrize("name", AWS_TYPES)
def test_aws_types_are_sane(name: str) -> None:
    entry = catalog.lookup_aws(name)
    assert entry is not None and entry.cloud == "aws"
    assert entry.gpus >= 1 and entry.vcpus >= 4
    assert 0 < entry.spot_usd_per_hour < entry.on_demand_usd_per_hour


def test_known_gpu_counts() -> None:
    assert catalog.gpus_for("aws", "p3.8xlarge") == 4
    assert catalog.gpus_for("aws", "p2.16xlarge") == 16
    assert catalog.gpus_for("aws", "nope.large") is None
    assert catalog.gpus_for("gcp", "a2-megagpu-16g") == 16
    assert catalog.gpus_for("gcp", "n1-standard-8", gpu_num=4) == 4


def test_gcp_prices_are_machine_plus_gpus() -> None:
    assert catalog.gcp_offering_price("n1-standard-8", "nvidia-tesla-v100", 2, False) == (
        pytest.approx(0.38 + 2 * 2.48)
    )
    assert catalog.gcp_offering_price("a2-highgpu-1g", None, 0, False) == pytest.approx(3.67)
    assert catalog.gcp_offering_price("n1-standard-4", None, 0, True) == pytest.approx(0.04)
    assert catalog.gcp_offering_price("e2-medium", None, 0, False) is None


def test_gpu_literal_matches_catalog() -> None:
    assert set(typing.get_args(GpuType)) == set(catalog.GCP_GPUS)
    built_in = {m.gpu_model for m in catalog.GCP_MACHINE_TYPES.values() if m.gpus}
    assert built_in <= set(catalog.GCP_GPUS)
    for machine in catalog.GCP_MACHINE_TYPES.values():
        if machine.gpus:
            assert machine.gpus in catalog.GCP_GPUS[machine.gpu_model].allowed_counts
