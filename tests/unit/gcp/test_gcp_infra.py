"""infra/gcp: the deploy script's dry run and the index file stay in step with the code."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from corral.adapters.gcp import firestore_store as fs
from corral.handlers.gcp import main

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "infra" / "gcp" / "deploy.sh"
INDEXES = ROOT / "infra" / "gcp" / "firestore.indexes.json"


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    config = tmp_path_factory.mktemp("cfg") / "cluster.yaml"
    config.write_text("{}")
    env = os.environ | {
        "DRY_RUN": "1",
        "PROJECT": "proj-123",
        "CONFIG_FILE": str(config),
        "USERS": "a@x.com,b@x.com",
    }
    done = subprocess.run(
        ["bash", str(DEPLOY)], env=env, capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout


def test_every_function_is_deployed_with_an_existing_entry_point(dry_run: str) -> None:
    deploys = re.findall(r"functions deploy (corral-[\w-]+) .*--entry-point=(\w+)", dry_run)
    assert {entry for _, entry in deploys} == {
        "api",
        "schedule",
        "scale_up",
        "idle_reap",
        "spot_reconcile",
    }
    for _, entry in deploys:
        assert callable(getattr(main, entry))
    assert "--no-allow-unauthenticated" in dry_run
    assert "--trigger-topic=corral-scale-up --retry" in dry_run


def test_iam_is_scoped(dry_run: str) -> None:
    assert "roles/compute.instanceAdmin.v1 --condition=expression" in dry_run
    assert "roles/owner" not in dry_run and "roles/editor" not in dry_run
    user_bindings = re.findall(r"service-accounts add-iam-policy-binding (\S+)", dry_run)
    assert user_bindings == ["corral-agent@proj-123.iam.gserviceaccount.com"]


def test_the_index_file_names_the_stores_collections_and_fields() -> None:
    spec = json.loads(INDEXES.read_text())
    groups = {i["collectionGroup"] for i in spec["indexes"]}
    prefix = "corral-"
    assert groups <= {prefix + c for c in (fs.INSTANCES, fs.TRIALS, fs.EVENTS)}
    events = [i for i in spec["indexes"] if i["collectionGroup"] == prefix + fs.EVENTS]
    assert [f["fieldPath"] for f in events[0]["fields"]] == ["pool", fs.EVENT_KEY]
    ttl = {f["collectionGroup"] for f in spec["fieldOverrides"] if f.get("ttl")}
    assert ttl == {prefix + fs.HEARTBEATS, prefix + fs.EVENTS, fs.LINES}
    assert all(f["fieldPath"] == fs.EXPIRE_AT for f in spec["fieldOverrides"] if f.get("ttl"))
