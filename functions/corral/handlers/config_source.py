"""The cluster config as a deployed function reads it: from text its runtime hands over
(an environment variable, an SSM parameter, a secret, a file), checked once per container.

Pools may leave out what the deployment knows, as Determined pools leave out what the master
reads from its instance metadata: the AWS region (Lambda's ``AWS_REGION``), the GCP project
(``GOOGLE_CLOUD_PROJECT``), and, when the deployment sets them, a zone (``CORRAL_ZONE``) and an
agent image (``CORRAL_AGENT_IMAGE_ID`` / ``CORRAL_AGENT_IMAGE``). Each value filled in is logged
as a warning naming where it came from.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Literal

from corral.domain.config import (
    ClusterConfig,
    ConfigError,
    defaults_from_env,
    load_cluster_config,
)

log = logging.getLogger(__name__)


class CompositionError(RuntimeError):
    """The function's environment or cluster config cannot make a working Context."""


def parse_cluster_config(
    text: str, source: str, env: Mapping[str, str] | None = None
) -> ClusterConfig:
    """Validate the config; a broken one stops the container with every problem named.
    ``env`` holds the deployment's defaults (the process environment when None)."""
    defaults = defaults_from_env(os.environ if env is None else env)
    try:
        loaded = load_cluster_config(text, defaults)
    except ConfigError as error:
        raise CompositionError(f"cluster config from {source} is invalid: {error}") from None
    for warning in loaded.warnings:
        log.warning("cluster config from %s: %s", source, warning)
    return loaded.config


def check_pools(
    config: ClusterConfig,
    cloud: Literal["aws", "gcp"],
    allowed: tuple[str | None, str | None],
    mismatch: str,
) -> None:
    """Refuse pools this deployment cannot serve, at start instead of at the first launch:
    another cloud's pools, and pools marked with another ownership pair than the ``allowed``
    (key, value) the deployment's IAM permits, when it names one. ``mismatch`` words that
    refusal: a template of ``{pool}``, ``{owner}`` and ``{allowed}``."""
    key, value = allowed
    for pool in config.resource_pools:
        if pool.cloud != cloud:
            raise CompositionError(
                f"pool {pool.name!r} is a {pool.cloud} pool; this is {cloud.upper()}"
            )
        owner = pool.ownership
        if key and value and (owner.key, owner.value) != (key, value):
            raise CompositionError(
                mismatch.format(
                    pool=pool.name, owner=f"{owner.key}={owner.value}", allowed=f"{key}={value}"
                )
            )
