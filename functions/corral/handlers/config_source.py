"""The cluster config as a deployed function reads it: from text its runtime hands over
(an environment variable, an SSM parameter, a secret, a file), checked once per container."""

from __future__ import annotations

import logging

from corral.domain.config import ClusterConfig, ConfigError, load_cluster_config

log = logging.getLogger(__name__)


class CompositionError(RuntimeError):
    """The function's environment or cluster config cannot make a working Context."""


def parse_cluster_config(text: str, source: str) -> ClusterConfig:
    """Validate the config; a broken one stops the container with every problem named."""
    try:
        loaded = load_cluster_config(text)
    except ConfigError as error:
        raise CompositionError(f"cluster config from {source} is invalid: {error}") from None
    for warning in loaded.warnings:
        log.warning("cluster config from %s: %s", source, warning)
    return loaded.config
