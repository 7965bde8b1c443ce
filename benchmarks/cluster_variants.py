"""A cluster config with pool settings changed on every pool, for the simulator benchmarks
that compare Corral's variants (fallback on / off, consolidation on / off) on one file."""

from __future__ import annotations

from pathlib import Path

import yaml

from corral.domain.config import ClusterConfig, load_cluster_config


def variant(path: Path, *, fallback: bool, consolidate: bool) -> ClusterConfig:
    """The cluster of ``path`` with ``on_demand_fallback`` and ``consolidate`` set on every
    pool's provider block."""
    raw = yaml.safe_load(path.read_text())
    for pool in raw["resource_pools"]:
        pool["provider"]["on_demand_fallback"] = fallback
        pool["provider"]["consolidate"] = consolidate
    return load_cluster_config(yaml.safe_dump(raw)).config
