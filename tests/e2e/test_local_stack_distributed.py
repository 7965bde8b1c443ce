"""The local stack end to end on a gang trial: ``examples/distributed.yaml`` (one 8-GPU
trial) on ``examples/cluster.yaml``, whose default pool offers g5.xlarge (1 GPU) and
g5.12xlarge (4 GPUs) with ``max_instances: 4``. The planner must buy two g5.12xlarge (eight
g5.xlarge are cheaper per GPU but over max_instances), the trial must run on both agents at
once and complete, and ``--follow`` must say why the trial waits while it waits.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.local.proctree import stop_tree
from corral.local.state import StateDir, pid_alive

from .test_local_stack import corral, corral_json, processes_mentioning

pytestmark = pytest.mark.e2e


@pytest.fixture
def gang_stack(tmp_path: Path) -> Iterator[Path]:
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


def test_the_distributed_example_runs_on_two_four_gpu_agents(gang_stack: Path) -> None:
    state_dir = gang_stack
    # --follow exits 0 only when every trial completed; a trial that never starts would
    # keep it waiting until the timeout.
    followed = corral(
        state_dir, "experiment", "create", "examples/distributed.yaml", "--follow", timeout=180
    )
    assert followed.returncode == 0, followed.stdout + followed.stderr
    lines = [line for line in followed.stdout.splitlines() if ".t0000: " in line]
    assert any("PENDING (waiting for " in line for line in lines), lines
    assert lines[-1].endswith("COMPLETED"), lines

    experiment_id = followed.stdout.split()[2]
    detail = corral_json(state_dir, "experiment", "describe", experiment_id)
    assert detail["state"] == "COMPLETED"
    (trial,) = detail["trials"]
    assert trial["slots"] == 8 and len(set(trial["ran_on"])) == 2
    agents = {a["id"]: a for a in corral_json(state_dir, "agent", "list", "--all")["instances"]}
    assert {agents[i]["instance_type"] for i in trial["ran_on"]} == {"g5.12xlarge"}
    logs = corral(state_dir, "trial", "logs", trial["id"])
    assert logs.returncode == 0 and logs.stdout.strip(), logs.stderr
    (pool,) = [p for p in corral_json(state_dir, "pool", "list")["pools"] if p["is_default"]]
    assert pool["cannot_serve"] is None

    # Down leaves nothing behind.
    children = corral_json(state_dir, "dev", "status")["children"]
    stack_pid = StateDir(state_dir).running_pid()
    down = corral(state_dir, "dev", "down")
    assert down.returncode == 0, down.stderr
    assert stack_pid is not None and not pid_alive(stack_pid)
    assert not [p for p in children if pid_alive(p)]
    assert not processes_mentioning(str(state_dir))
