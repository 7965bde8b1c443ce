"""Which pools a cloud's provider adapter serves: what the EC2 and GCE providers share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from corral.domain.config.aws import AwsProvider
from corral.domain.config.cluster import ClusterConfig
from corral.domain.config.gcp import GcpProvider

P = TypeVar("P", AwsProvider, GcpProvider)


def cloud_pools(config: ClusterConfig | Mapping[str, object], block: type[P]) -> dict[str, P]:
    """Pool name -> provider block, for the pools whose block is a ``block`` (the adapter's
    own cloud); ``config`` is the cluster config, or such a mapping already."""
    if isinstance(config, ClusterConfig):
        pools: dict[str, object] = {p.name: p.provider for p in config.resource_pools}
    else:
        pools = dict(config)
    return {name: p for name, p in pools.items() if isinstance(p, block)}
