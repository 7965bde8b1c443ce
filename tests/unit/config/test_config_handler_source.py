"""A deployed function reading its cluster config names every problem, not the first layer."""

from __future__ import annotations

import pytest
from config_helpers import aws_pool, dump

from corral.handlers.config_source import CompositionError, parse_cluster_config


def test_handler_config_source_names_every_problem() -> None:
    text = dump(
        {
            "resource_pools": [
                aws_pool(root_volume_size=10, min_instances=3, max_instances=1),
                aws_pool(),
            ]
        }
    )
    with pytest.raises(CompositionError) as info:
        parse_cluster_config(text, "the test")
    message = str(info.value)
    assert "resource_pools[0].provider.root_volume_size: must be >= 100" in message
    assert "resource_pools[0].provider.max_instances: must be >= min_instances" in message
    assert "resource_pools[1].name: duplicate pool name 'default'" in message
