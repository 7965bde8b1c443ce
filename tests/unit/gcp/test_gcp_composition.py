"""The GCP composition root: config from the environment, pools it can serve, lazy clients."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.adapters.gcp.firestore_store import FirestoreStore
from corral.adapters.gcp.gce_provider import GceProvider
from corral.adapters.gcp.pubsub_queue import PubSubQueue
from corral.handlers.gcp.composition import CompositionError, context_from_env

POOL = {
    "pool_name": "gpu",
    "provider": {
        "type": "gcp",
        "project": "proj-123",
        "zone": "us-central1-a",
        "boot_disk_source_image": "projects/p/global/images/agent",
        "label_key": "managed-by",
        "label_value": "corral",
    },
}
CONFIG = json.dumps({"resource_pools": [POOL]})


def test_a_context_on_firestore_gce_and_pubsub_without_any_client_call() -> None:
    ctx = context_from_env({"CORRAL_CLUSTER_CONFIG": CONFIG, "GOOGLE_CLOUD_PROJECT": "proj-123"})
    assert isinstance(ctx.store, FirestoreStore)
    assert isinstance(ctx.cloud, GceProvider)
    assert isinstance(ctx.queue, PubSubQueue)
    assert ctx.default_pool == "gpu" and set(ctx.pools) == {"gpu"}


def test_the_config_may_come_from_a_mounted_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CONFIG)
    env = {"CORRAL_CLUSTER_CONFIG_FILE": str(path), "GOOGLE_CLOUD_PROJECT": "proj-123"}
    assert context_from_env(env).default_pool == "gpu"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GOOGLE_CLOUD_PROJECT": "p"}, "CORRAL_CLUSTER_CONFIG"),
        ({"CORRAL_CLUSTER_CONFIG": CONFIG}, "GOOGLE_CLOUD_PROJECT"),
        ({"CORRAL_CLUSTER_CONFIG": "resource_pools: 3", "GOOGLE_CLOUD_PROJECT": "p"}, "invalid"),
        (
            {
                "CORRAL_CLUSTER_CONFIG": CONFIG,
                "GOOGLE_CLOUD_PROJECT": "p",
                "CORRAL_LABEL_KEY": "managed-by",
                "CORRAL_LABEL_VALUE": "other",
            },
            "IAM conditions",
        ),
    ],
)
def test_unusable_environments_fail_clearly(env: dict[str, str], message: str) -> None:
    with pytest.raises(CompositionError, match=message):
        context_from_env(env)
