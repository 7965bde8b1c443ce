"""The local stack end to end, driven as a user drives it: the ``corral`` CLI in subprocesses.

``corral dev up --detach`` (its own state dir, timers 4x faster), submit the example grid,
see instances in moto carrying the ownership tags, interrupt one busy spot instance, see the
interrupted trial resume from its checkpoint on another instance, see every trial complete
and the instance count return to ``min_instances`` (0), ``corral dev down``, and check that
no process is left behind. Every wait is a bounded poll.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.local.proctree import stop_tree
from corral.local.state import StateDir, pid_alive

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def corral(state_dir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CORRAL_DEV_DIR": str(state_dir), "COLUMNS": "200"}
    env.pop("CORRAL_ENDPOINT", None)
    return subprocess.run(
        [sys.executable, "-m", "corral.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def corral_json(state_dir: Path, *args: str) -> Any:
    done = corral(state_dir, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, poll: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return [p for p in found if pid_alive(p)]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Path]:
    state_dir = tmp_path / "dev"
    up = corral(
        state_dir,
        "dev",
        "up",
        "--detach",
        "--timer-scale",
        "0.25",
        "--boot-delay",
        "1",
        timeout=120,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield state_dir
    finally:
        pid = StateDir(state_dir).running_pid()
        if pid is not None:
            corral(state_dir, "dev", "down")
            if pid_alive(pid):  # the CLI itself failed: stop the stack (and its tree) directly
                stop_tree(pid, grace_s=10.0)


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

    # Down leaves nothing behind.
    children = corral_json(state_dir, "dev", "status")["children"]
    stack_pid = StateDir(state_dir).running_pid()
    down = corral(state_dir, "dev", "down")
    assert down.returncode == 0, down.stderr
    assert stack_pid is not None and not pid_alive(stack_pid)
    assert not [p for p in children if pid_alive(p)]
    assert not processes_mentioning(str(state_dir))
