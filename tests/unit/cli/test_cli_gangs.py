"""The CLI on a gang trial (examples/distributed.yaml on a pool shaped like
examples/cluster.yaml's default): ``experiment create --follow`` prints every change of the
pending reason once, and ``pool list`` says when a pool cannot serve its queue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corral.adapters.memory import SimulatedCloudConfig
from corral.cli import experiment_cmd
from corral.cli.main import app
from corral.domain.offerings import CapacityType, Offering
from tests.services.harness import Cluster, Script, make_pool

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SMALL = Offering("g5.xlarge", "us-east-1", CapacityType.SPOT, 1, 0.4)
BIG = Offering("g5.12xlarge", "us-east-1", CapacityType.SPOT, 4, 2.25)


@pytest.fixture
def cluster() -> Cluster:
    # Instances boot for longer than the one-minute schedule timer: a pass sees them boot.
    return Cluster(
        make_pool(SMALL, BIG, name="default", max_instances=4),
        cloud=SimulatedCloudConfig(boot_s_mean=150.0),
    )


@pytest.fixture(autouse=True)
def _follow_in_fake_time(
    api: tuple[str, Cluster], cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI against the API over ``cluster``, on a wider terminal. --follow polls every
    2 s: let the fake clock run instead of sleeping (for at most an hour of it: a trial that
    never starts must fail the test, not hang it)."""
    monkeypatch.setenv("COLUMNS", "250")
    started = cluster.clock.now()

    def sleep(_: float) -> None:
        if cluster.clock.now() - started > 3600:
            raise RuntimeError("gave up: an hour of fake time went by")
        cluster.step(5.0)

    monkeypatch.setattr(experiment_cmd.time, "sleep", sleep)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_follow_prints_each_change_of_the_pending_reason_once(cluster: Cluster) -> None:
    cluster.default_script = Script(duration_s=30)
    result = cli("experiment", "create", str(EXAMPLES / "distributed.yaml"), "--follow")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if ".t0000: " in line]
    pending = [line for line in lines if ": PENDING" in line]
    assert "waiting for the next schedule pass" in pending[0]
    # The scheduler's own reasons follow, as they change: the launches, then the boot.
    assert any("waiting for a new g5.12xlarge" in line for line in pending[1:]), lines
    assert any("to boot and register" in line for line in pending[1:]), lines
    assert len(lines) == len(set(lines)), "a change is printed once"
    assert any(": RUNNING on inst-" in line and "," in line for line in lines)
    assert lines[-1].endswith("COMPLETED")


def test_pool_list_shows_a_pool_that_cannot_serve_its_queue(cluster: Cluster) -> None:
    cluster.default_script = Script(duration_s=3600)
    grid = cli("experiment", "create", str(EXAMPLES / "grid.yaml"))  # four 1-GPU trials
    assert grid.exit_code == 0, grid.output
    cluster.pump()
    cluster.run(60)
    calm = json.loads(cli("pool", "list", "--json").output)["pools"][0]
    assert calm["cannot_serve"] is None and calm["trials_unserved"] == 0

    cli("experiment", "create", str(EXAMPLES / "distributed.yaml"))
    cluster.pump()
    (pool,) = json.loads(cli("pool", "list", "--json").output)["pools"]
    assert pool["trials_unserved"] == 1
    assert pool["cannot_serve"].startswith(
        "1 pending trial(s) no launch serves: pool default is at max_instances (4)"
    )
    table = cli("pool", "list").output
    assert "CANNOT SERVE" in table and "no launch serves" in table
