"""A cluster config with pool settings changed on every pool, for the simulator benchmarks
that compare Corral's variants (fallback on / off, consolidation on / off, a warm pool) on
one file."""

from __future__ import annotations

from pathlib import Path

import yaml

from corral.domain.config import ClusterConfig, load_cluster_config

# The warm pool the benchmarks give a variant that has one: 16 stopped instances at most
# (a quarter of sim-one-type's max_instances, an eighth of sim-cluster's).
WARM_POOL_SIZE = 16


def variant(path: Path, *, fallback: bool, consolidate: bool, warm: bool = False) -> ClusterConfig:
    """The cluster of ``path`` with ``on_demand_fallback``, ``consolidate`` and (``warm``) a
    warm pool of ``WARM_POOL_SIZE`` set on every pool's provider block."""
    raw = yaml.safe_load(path.read_text())
    for pool in raw["resource_pools"]:
        pool["provider"]["on_demand_fallback"] = fallback
        pool["provider"]["consolidate"] = consolidate
        if warm:
            pool["provider"]["warm_pool"] = {"size": WARM_POOL_SIZE}
    return load_cluster_config(yaml.safe_dump(raw)).config
