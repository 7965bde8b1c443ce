"""The one place the Cloud Functions wire adapters to services: ``build_context()``.

Built once per function instance, on the first invocation, then cached (a failed build is
retried on the next one): importing ``main`` costs no Google client import, so ``/healthz``
answers without Firestore, and a bad config fails the invocation with a clear log line.

Environment (set by ``infra/gcp/deploy.sh``):

``CORRAL_CLUSTER_CONFIG``
    The cluster config, YAML or JSON text. deploy.sh maps it from a Secret Manager secret
    (``--set-secrets``), so no Secret Manager client is needed here and a new secret
    version reaches new instances without a code deploy.
``CORRAL_CLUSTER_CONFIG_FILE``
    ... or a path to it (a secret mounted as a volume). The variable wins when both are set.
``GOOGLE_CLOUD_PROJECT`` (or ``CORRAL_PROJECT``)
    The project of Firestore and Pub/Sub. Pools name their own Compute Engine project.
``CORRAL_FIRESTORE_DATABASE``, ``CORRAL_COLLECTION_PREFIX``
    Firestore database (default ``(default)``) and collection-name prefix (``corral-``).
``CORRAL_TOPIC_SCHEDULE``, ``CORRAL_TOPIC_SCALE_UP``, ``CORRAL_TOPIC_INTERRUPTIONS``
    Topic ids, defaulting to ``corral-schedule``, ``corral-scale-up``, ``corral-interruptions``.
``CORRAL_ADMINS``
    Admins added to the cluster config's ``admins`` (comma-separated principal names or
    patterns). Optional; the local stack sets it to its default user.
``CORRAL_LABEL_KEY``, ``CORRAL_LABEL_VALUE``
    The ownership label the IAM conditions are written for. Optional; when set, every pool
    must use exactly this pair (refused at start rather than failing later with 403s).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from corral.domain.access import admins_with
from corral.domain.config import ClusterConfig
from corral.handlers.config_source import CompositionError, check_pools, parse_cluster_config
from corral.ports.clock import Clock, SystemClock
from corral.ports.queue import QueueName
from corral.services.shared.service_context import Context

CONFIG_ENV = "CORRAL_CLUSTER_CONFIG"
CONFIG_FILE_ENV = "CORRAL_CLUSTER_CONFIG_FILE"
ADMINS_ENV = "CORRAL_ADMINS"
TOPIC_ENV: Mapping[QueueName, str] = {
    QueueName.SCHEDULE: "CORRAL_TOPIC_SCHEDULE",
    QueueName.SCALE_UP: "CORRAL_TOPIC_SCALE_UP",
    QueueName.INTERRUPTIONS: "CORRAL_TOPIC_INTERRUPTIONS",
}


@functools.cache
def build_context() -> Context:
    """The instance's Context, built on first use from ``os.environ``. Tests monkeypatch
    this function to return a Context on memory adapters."""
    return context_from_env(os.environ)


def project_of(env: Mapping[str, str]) -> str:
    project = env.get("CORRAL_PROJECT") or env.get("GOOGLE_CLOUD_PROJECT") or ""
    if not project:
        raise CompositionError("set GOOGLE_CLOUD_PROJECT (or CORRAL_PROJECT)")
    return project


def context_from_env(
    env: Mapping[str, str],
    *,
    clock: Clock | None = None,
    clients: Mapping[str, Any] | None = None,
) -> Context:
    """A Context on Firestore, Compute Engine and Pub/Sub as ``env`` describes. ``clients``
    may hold ready ``firestore``, ``instances``, ``operations`` and ``publisher`` clients."""
    from corral.adapters.gcp.firestore_store import FirestoreStore
    from corral.adapters.gcp.gce_provider import GceProvider
    from corral.adapters.gcp.pubsub_queue import DEFAULT_TOPICS, PubSubQueue

    clients = clients or {}
    clock = clock or SystemClock()
    project = project_of(env)
    config = cluster_config(env)
    check_pools(
        config,
        "gcp",
        (env.get("CORRAL_LABEL_KEY"), env.get("CORRAL_LABEL_VALUE")),
        "pool {pool!r} labels its instances {owner}, but this deployment's IAM conditions "
        "only allow {allowed}",
    )
    topics = {name: env.get(var) or DEFAULT_TOPICS[name] for name, var in TOPIC_ENV.items()}
    return Context(
        store=FirestoreStore(
            clients.get("firestore"),
            prefix=env.get("CORRAL_COLLECTION_PREFIX", "corral-"),
            project=project,
            database=env.get("CORRAL_FIRESTORE_DATABASE") or None,
        ),
        cloud=GceProvider(
            config,
            instances=clients.get("instances"),
            operations=clients.get("operations"),
            clock=clock,
            api_url=env.get("CORRAL_API_URL"),
        ),
        queue=PubSubQueue(project, topics, clients.get("publisher")),
        clock=clock,
        pools={pool.name: pool for pool in config.resource_pools},
        default_pool=config.default_pool_name,
        admins=admins_with(config.admins, env.get(ADMINS_ENV, "")),
    )


def cluster_config(env: Mapping[str, str]) -> ClusterConfig:
    text, source = env.get(CONFIG_ENV, "").strip(), CONFIG_ENV
    if not text:
        path = env.get(CONFIG_FILE_ENV, "").strip()
        if not path:
            raise CompositionError(f"set {CONFIG_ENV} (the config) or {CONFIG_FILE_ENV}")
        source = path
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise CompositionError(f"cannot read the cluster config at {path}: {error}") from None
    return parse_cluster_config(text, source, env)


__all__ = ["CompositionError", "build_context", "cluster_config", "context_from_env"]
