"""Helpers for the local-stack end-to-end tests: the ``corral`` CLI in subprocesses, bounded
polls, and checks that ``corral dev down`` leaves nothing behind. The ``stack`` fixture
(conftest.py) starts a stack with these."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from corral.local.proctree import stop_tree
from corral.local.state import StateDir, pid_alive

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def corral(
    state_dir: Path, *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {**os.environ, "CORRAL_DEV_DIR": str(state_dir), "COLUMNS": "200"}
    base.pop("CORRAL_ENDPOINT", None)
    env = {**base, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "corral.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def moto_client(state_dir: Path, service: str) -> Any:
    """A boto3 client on the stack's moto server (its endpoint from the state dir)."""
    import boto3

    return boto3.client(
        service,
        endpoint_url=StateDir(state_dir).aws_endpoint(),
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
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


@contextmanager
def running_stack(state_dir: Path) -> Iterator[Path]:
    """``corral dev up --detach`` (timers 4x faster) in ``state_dir``; down on exit, even when
    the test failed, and the stack's process tree stopped directly if the CLI could not."""
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
            corral(state_dir, "dev", "down", "--force")  # whatever the test left running
            if pid_alive(pid):  # the CLI itself failed: stop the stack (and its tree) directly
                stop_tree(pid, grace_s=10.0)


def assert_down_leaves_nothing_behind(state_dir: Path) -> None:
    """``corral dev down`` stops the stack, every child it reported, and every process that
    mentions its state dir."""
    children = corral_json(state_dir, "dev", "status")["children"]
    stack_pid = StateDir(state_dir).running_pid()
    down = corral(state_dir, "dev", "down")
    assert down.returncode == 0, down.stderr
    assert stack_pid is not None and not pid_alive(stack_pid)
    assert not [p for p in children if pid_alive(p)]
    assert not processes_mentioning(str(state_dir))
