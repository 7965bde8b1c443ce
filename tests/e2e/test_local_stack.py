"""The local stack end to end, driven as a user drives it: the ``corral`` CLI in subprocesses.

``corral dev up --detach`` (its own state dir, timers 4x faster), submit the example grid,
see ``corral dev down`` refuse while it runs, see instances in moto carrying the ownership
tags, interrupt one busy spot instance, see the
interrupted trial resume from its checkpoint on another instance, see every trial complete
and the instance count return to ``min_instances`` (0), ``corral dev down``, and check that
no process is left behind. Every wait is a bounded poll.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.local.state import StateDir
from tests.e2e.local_stack import (
    assert_down_leaves_nothing_behind,
    corral,
    corral_json,
    wait_for,
)

pytestmark = pytest.mark.e2e


def owned_instances(state_dir: Path) -> list[dict[str, Any]]:
    import boto3

    endpoint = StateDir(state_dir).aws_endpoint()
    ec2 = boto3.client(
        "ec2",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    reply = ec2.describe_instances(Filters=[{"Name": "tag:managed-by", "Values": ["corral-local"]}])
    return [i for r in reply["Reservations"] for i in r["Instances"]]


def test_grid_survives_a_spot_interruption_and_scales_back_to_zero(stack: Path) -> None:
    state_dir = stack
    status = corral_json(state_dir, "dev", "status")
    assert status["running"] and status["endpoint"].startswith("http://127.0.0.1:")

    created = corral_json(state_dir, "experiment", "create", "examples/grid.yaml")
    experiment_id = created["id"]
    assert created["trial_count"] == 4

    # Stopping the stack now would lose the experiment: refused, one line, nothing stopped;
    # asked with the stack's own token (a CORRAL_TOKEN left from an earlier run is stale).
    refused = corral(state_dir, "dev", "down", env={"CORRAL_TOKEN": "left-from-an-earlier-run"})
    assert refused.returncode != 0
    assert experiment_id in refused.stderr and "--force" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert corral_json(state_dir, "dev", "status")["running"]

    # Instances appear in moto, tagged as Corral's.
    instances = wait_for(
        "4 tagged instances in moto",
        lambda: (
            [i for i in owned_instances(state_dir) if i["State"]["Name"] == "running"][:4] or None
        ),
        60,
    )
    tags = {t["Key"]: t["Value"] for t in instances[0]["Tags"]}
    assert tags["managed-by"] == "corral-local"
    assert tags[POOL_TAG] == "default" and tags[RECORD_TAG].startswith("inst-")

    # Each booted from its user data on a disk of its own: the agent's config is the one
    # scale_up rendered (EC2 auth: it signs with its role's credentials, no dev token).
    disk = state_dir / "agents" / instances[0]["InstanceId"] / "root"
    config_file = wait_for(
        "the first instance's boot", lambda: next(disk.glob("etc/corral/agent.yaml"), None), 60
    )
    config = json.loads(config_file.read_text())
    assert config["auth"] == "aws" and "dev_token" not in config
    assert config["executor"] == "process"  # the local deployment's CORRAL_AGENT_SETTINGS

    # Interrupt a spot instance whose trial has been running (and checkpointing) a while.
    def running_trial() -> dict[str, Any] | None:
        detail = corral_json(state_dir, "experiment", "describe", experiment_id)
        running = [t for t in detail["trials"] if t["state"] == "RUNNING" and t["placement"]]
        return running[0] if running else None

    trial = wait_for("a running trial", running_trial, 60, poll=0.5)
    time.sleep(5)  # let it pass its first checkpoints (one every 5 steps of 0.25 s)
    record_id = trial["placement"][0]["instance_id"]
    agents = corral_json(state_dir, "agent", "list")["instances"]
    cloud_id = next(a["cloud_id"] for a in agents if a["id"] == record_id)
    interrupted = corral(state_dir, "dev", "interrupt", cloud_id, "--notice", "4")
    assert interrupted.returncode == 0, interrupted.stderr

    # Every trial completes; the interrupted one resumed from its checkpoint elsewhere.
    def finished() -> dict[str, Any] | None:
        detail = corral_json(state_dir, "experiment", "describe", experiment_id)
        return detail if detail["state"] in ("COMPLETED", "FAILED", "CANCELLED") else None

    detail = wait_for("the experiment to finish", finished, 120, poll=2.0)
    assert detail["state"] == "COMPLETED", detail["trials_by_state"]
    again = next(t for t in detail["trials"] if t["id"] == trial["id"])
    assert again["preemptions"] >= 1
    assert len(set(again["ran_on"])) >= 2 and again["ran_on"][0] == record_id
    logs = corral(state_dir, "trial", "logs", trial["id"])
    assert "SIGTERM: checkpointed step" in logs.stdout
    assert "resumed from step" in logs.stdout

    # Idle instances are reaped back to min_instances (0).
    wait_for(
        "idle instances to be terminated",
        lambda: (
            not [
                i
                for i in owned_instances(state_dir)
                if i["State"]["Name"] in ("pending", "running")
            ]
        ),
        120,
        poll=2.0,
    )

    # Their disks went with them (DeleteOnTermination), once the emulator saw them go.
    wait_for(
        "the terminated instances' disks to be deleted",
        lambda: not list((state_dir / "agents").iterdir()) or None,
        30,
    )

    # Down leaves nothing behind.
    assert_down_leaves_nothing_behind(state_dir)
