"""Helpers shared by the config tests (a plain module, not conftest, so imports are explicit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


def aws_pool(**provider: Any) -> dict[str, Any]:
    """A minimal valid AWS pool mapping, with provider fields overridden."""
    block: dict[str, Any] = {
        "type": "aws",
        "region": "us-east-1",
        "image_id": "ami-0123456789abcdef0",
        "instance_type": "p3.8xlarge",
    }
    block.update(provider)
    return {"name": "default", "provider": block}


def gcp_pool(**provider: Any) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "gcp",
        "project": "my-project-1",
        "zone": "us-central1-a",
        "boot_disk_source_image": "projects/my-project-1/global/images/agent",
        "instance_type": {
            "machine_type": "n1-standard-8",
            "gpu_type": "nvidia-tesla-t4",
            "gpu_num": 2,
        },
    }
    block.update(provider)
    return {"name": "gpus", "provider": block}


def dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)
