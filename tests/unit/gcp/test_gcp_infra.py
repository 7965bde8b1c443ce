"""infra/gcp: the deploy script's dry run and the index file stay in step with the code."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corral.adapters.gcp import firestore_store as fs
from corral.handlers.gcp import main

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "infra" / "gcp" / "deploy.sh"
INDEXES = ROOT / "infra" / "gcp" / "firestore.indexes.json"


# One GCP pool; ``{provider}`` adds lines to its provider block (indented by six spaces).
POOL = """\
resource_pools:
  - name: gpu
    provider:
      type: gcp
      zone: us-central1-a
      boot_disk_source_image: projects/proj-123/global/images/corral-agent
{provider}"""
SCALE_UP = "serviceAccount:corral-scale-up@proj-123.iam.gserviceaccount.com"


def _deploy(tmp_path: Path, provider: str = "") -> subprocess.CompletedProcess[str]:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    config = tmp_path / "cluster.yaml"
    config.write_text(POOL.format(provider=provider))
    env = os.environ | {
        "DRY_RUN": "1",
        "PROJECT": "proj-123",
        "CONFIG_FILE": str(config),
        "USERS": "a@x.com,b@x.com",
        "PYTHON": sys.executable,  # reads the config with Corral's loader
    }
    return subprocess.run(
        ["bash", str(DEPLOY)], env=env, capture_output=True, text=True, check=False, timeout=60
    )


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    done = _deploy(tmp_path_factory.mktemp("cfg"))
    assert done.returncode == 0, done.stderr
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
    # Acting as an account: scale_up as the agent's (to attach it), the agent as the trials'
    # (to mint their tokens); no other account is ever granted on.
    acts_on = re.findall(r"service-accounts add-iam-policy-binding (\S+)", dry_run)
    assert acts_on == [
        "corral-agent@proj-123.iam.gserviceaccount.com",
        "corral-trial@proj-123.iam.gserviceaccount.com",
    ]
    # A pool with no existing disk and no shared VPC needs nothing more.
    assert (
        "roles/compute.networkUser" not in dry_run and "disks add-iam-policy-binding" not in dry_run
    )


# The seed's own example (docs "Attach a Disk To Each Dynamic Agent"): an existing disk,
# attached read-only through base_config. Its name is not corral-agent-*, so the name-prefix
# condition on instanceAdmin.v1 never lets scale_up use it: the launch would be refused.
SEED_DISK = """\
      base_config:
        disks:
          - mode: READ_ONLY
            boot: false
            source: zones/us-central1-a/disks/imagenet
            autoDelete: false
"""


def test_an_existing_disk_in_base_config_can_be_attached_by_scale_up(tmp_path: Path) -> None:
    done = _deploy(tmp_path, SEED_DISK)

    assert done.returncode == 0, done.stderr
    role = "projects/proj-123/roles/corralDiskReader"
    assert (
        "gcloud --quiet iam roles create corralDiskReader --project=proj-123 --stage=GA "
        "--title=Corral:\\ attach\\ an\\ existing\\ disk --permissions=compute.disks.useReadOnly"
    ) in done.stdout
    assert (
        "gcloud --quiet compute disks add-iam-policy-binding imagenet --project=proj-123 "
        f"--zone=us-central1-a --member={SCALE_UP} --role={role}"
    ) in done.stdout
    # Only scale_up, only that disk, and read-only use: no write access to the data.
    assert done.stdout.count("disks add-iam-policy-binding") == 1
    assert "compute.disks.use " not in done.stdout and "corralDiskUser" not in done.stdout


def test_a_read_write_disk_of_another_project_gets_the_use_role_there(tmp_path: Path) -> None:
    disk = SEED_DISK.replace("READ_ONLY", "READ_WRITE").replace(
        "source: zones/", "source: https://www.googleapis.com/compute/v1/projects/data-proj/zones/"
    )
    done = _deploy(tmp_path, disk)

    assert done.returncode == 0, done.stderr
    assert "iam roles create corralDiskUser --project=data-proj" in done.stdout
    assert "--permissions=compute.disks.use \n" in done.stdout  # run() ends each word with a space
    assert (
        "compute disks add-iam-policy-binding imagenet --project=data-proj --zone=us-central1-a "
        f"--member={SCALE_UP} --role=projects/data-proj/roles/corralDiskUser"
    ) in done.stdout


# The seed: "for the Determined agent to use a shared VPC, the service account that the master
# runs with needs to have the Compute Network User role" (on the host project's subnetwork).
SHARED_VPC = """\
      network_interface:
        network: projects/host-proj/global/networks/shared
        subnetwork: projects/host-proj/regions/us-central1/subnetworks/agents
"""


def test_a_shared_vpc_subnetwork_grants_scale_up_network_user_on_it(tmp_path: Path) -> None:
    done = _deploy(tmp_path, SHARED_VPC)

    assert done.returncode == 0, done.stderr
    assert (
        "gcloud --quiet compute networks subnets add-iam-policy-binding agents "
        f"--project=host-proj --region=us-central1 --member={SCALE_UP} "
        "--role=roles/compute.networkUser"
    ) in done.stdout
    assert done.stdout.count("roles/compute.networkUser") == 1


def test_a_shared_vpc_network_without_subnetwork_is_a_warning_not_a_project_grant(
    tmp_path: Path,
) -> None:
    network_only = "".join(SHARED_VPC.splitlines(keepends=True)[:2])
    done = _deploy(tmp_path, network_only)

    assert done.returncode == 0, done.stderr
    assert "roles/compute.networkUser" not in done.stdout
    assert "warning: pool 'gpu' uses the network" in done.stderr
    assert "set network_interface.subnetwork" in done.stderr


def test_a_subnetwork_of_the_pools_own_project_needs_no_extra_role(tmp_path: Path) -> None:
    own = SHARED_VPC.replace("host-proj", "proj-123")
    done = _deploy(tmp_path, own)

    assert done.returncode == 0, done.stderr
    assert "roles/compute.networkUser" not in done.stdout


def test_an_invalid_config_stops_the_deploy_before_any_change(tmp_path: Path) -> None:
    done = _deploy(tmp_path, "      boot_disk_size: 10\n")

    assert done.returncode != 0
    assert "gcloud" not in done.stdout
    assert "boot_disk_size" in done.stderr and "Traceback" not in done.stderr


def test_a_disk_the_script_cannot_read_is_a_warning_naming_the_pool(tmp_path: Path) -> None:
    odd = SEED_DISK.replace("zones/us-central1-a/disks/imagenet", "imagenet")
    done = _deploy(tmp_path, odd)

    assert done.returncode == 0, done.stderr
    assert "warning: pool 'gpu' base_config.disks[0].source 'imagenet'" in done.stderr
    assert "disks add-iam-policy-binding" not in done.stdout


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
