"""Helpers shared by the config tests (a plain module, not conftest, so imports are explicit)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.domain.config import ConfigError, load_cluster_config

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


# Minimal valid provider blocks of each cloud.
AWS_PROVIDER: dict[str, Any] = {
    "type": "aws",
    "region": "us-east-1",
    "image_id": "ami-0123456789abcdef0",
    "instance_type": "p3.8xlarge",
}
GCP_PROVIDER: dict[str, Any] = {
    "type": "gcp",
    "project": "my-project-1",
    "zone": "us-central1-a",
    "boot_disk_source_image": "projects/my-project-1/global/images/agent",
    "instance_type": {"machine_type": "n1-standard-8", "gpu_type": "nvidia-tesla-t4", "gpu_num": 2},
}


def _pool(name: str, block: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    # A deep copy: a test that edits its pool never changes the next test's.
    return {"name": name, "provider": {**copy.deepcopy(block), **overrides}}


def aws_pool(**provider: Any) -> dict[str, Any]:
    """A minimal valid AWS pool mapping, with provider fields overridden."""
    return _pool("default", AWS_PROVIDER, provider)


def gcp_pool(**provider: Any) -> dict[str, Any]:
    """A minimal valid GCP pool mapping (named ``gpus``), with provider fields overridden."""
    return _pool("gpus", GCP_PROVIDER, provider)


def cluster_problems(data: dict[str, Any]) -> list[str]:
    """The problems loading the cluster config ``data`` reports (it must fail)."""
    with pytest.raises(ConfigError) as info:
        load_cluster_config(dump(data))
    return [str(p) for p in info.value.problems]


def dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)
