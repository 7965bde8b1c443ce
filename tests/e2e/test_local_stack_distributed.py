"""The local stack end to end on a gang trial: ``examples/distributed.yaml`` (one 8-GPU
trial) on ``examples/cluster.yaml``, whose default pool offers g5.xlarge (1 GPU) and
g5.12xlarge (4 GPUs) with ``max_instances: 4``. The planner must buy two g5.12xlarge (eight
g5.xlarge are cheaper per GPU but over max_instances), the trial must run on both agents at
once and complete, and ``--follow`` must say why the trial waits while it waits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.local_stack import assert_down_leaves_nothing_behind, corral, corral_json

pytestmark = pytest.mark.e2e


def test_the_distributed_example_runs_on_two_four_gpu_agents(stack: Path) -> None:
    state_dir = stack
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
    assert_down_leaves_nothing_behind(state_dir)
