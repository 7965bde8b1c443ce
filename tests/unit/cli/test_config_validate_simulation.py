"""``corral config validate`` checks a cluster config's ``simulation:`` block with the
simulator's own validator: the same problems, at the same paths, as ``corral sim`` reports.
Before, validate said ``ok`` to a block the simulator refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "sim-cluster.yaml"
TRACE = str(REPO / "examples" / "tiny-trace.csv")

runner = CliRunner()


def with_simulation(tmp_path: Path, block: str, *, pools: str | None = None) -> Path:
    """examples/sim-cluster.yaml with its simulation block replaced by ``block``."""
    text = EXAMPLE.read_text(encoding="utf-8")
    cluster = text[: text.index("simulation:")]
    if pools is not None:
        cluster = cluster.replace("max_instances: 128", pools)
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster + block + "\n", encoding="utf-8")
    return path


def validate(path: Path) -> tuple[int, str, str]:
    result = runner.invoke(app, ["config", "validate", str(path)])
    return result.exit_code, result.stdout, result.stderr


def simulate(path: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["sim", "--trace", TRACE, "--config", str(path)])
    return result.exit_code, result.stderr


CASES = {
    "simulation: {seed: abc, bogus: 1}": [
        "simulation.seed: must be an integer",
        "simulation.bogus: unknown field",
    ],
    "simulation: {boot: {pending: -1}}": [
        "simulation.boot.pending: invalid duration -1: must not be negative",
    ],
    "simulation: {spot: {notice: 10 minutes}}": [
        "simulation.spot.notice: invalid duration '10 minutes': use seconds or a duration such"
        " as 90s, 5m, 1h30m, 250ms",
    ],
    "simulation: {capacity: {spot: {unavailable_fraction: 1.5, mean_outage: 30m}}}": [
        "simulation.capacity.spot.unavailable_fraction: must be < 1.0",
    ],
    "simulation: {checkpoint_interval: 0}": [
        "simulation.checkpoint_interval: must be > 0",
    ],
    "simulation: {capacity: {offerings: {g: {unavailable_fraction: 0.1}}}}": [
        "simulation.capacity.offerings.g.mean_outage: required",
    ],
    "simulation: {determined_instance_type: nosuch.type}": [
        "simulation.determined_instance_type: unknown instance type 'nosuch.type' (the default"
        " pool 'v100', where every simulated job runs, offers p3.2xlarge, p3.8xlarge,"
        " p3.16xlarge)",
    ],
}


@pytest.mark.parametrize("block", list(CASES))
def test_validate_reports_what_the_simulator_refuses(tmp_path: Path, block: str) -> None:
    path = with_simulation(tmp_path, block)
    code, out, err = validate(path)
    assert (code, out) == (2, "")
    assert err.splitlines() == CASES[block]
    assert simulate(path) == (2, err)  # the same lines, from the same validator


def test_every_problem_of_the_pools_and_the_block_in_one_run(tmp_path: Path) -> None:
    path = with_simulation(
        tmp_path, "simulation: {seed: abc, checkpoint_interval: 0}", pools="max_instances: -1"
    )
    code, _, err = validate(path)
    assert code == 2
    assert err.splitlines() == [
        "resource_pools[0].provider.max_instances: must be >= 0",
        "simulation.seed: must be an integer",
        "simulation.checkpoint_interval: must be > 0",
    ]


def test_a_block_that_is_not_a_mapping_is_reported_once(tmp_path: Path) -> None:
    code, _, err = validate(with_simulation(tmp_path, "simulation: 5"))
    assert code == 2
    assert err.splitlines() == ["simulation: must be a mapping"]


def test_a_valid_block_is_ok(tmp_path: Path) -> None:
    block = "simulation: {seed: 3, determined_instance_type: p3.8xlarge, restart_overhead: 1m}"
    for path in (EXAMPLE, with_simulation(tmp_path, block)):
        code, out, err = validate(path)
        assert code == 0, err
        assert out.startswith("ok\n")


def test_loading_a_cluster_config_does_not_import_the_simulator() -> None:
    """The deployed functions load cluster configs on their cold start; the simulator (and
    what it imports) is for the CLI only."""
    code = (
        "import json, sys\n"
        "from corral.domain.config import load_cluster_config\n"
        f"load_cluster_config({str(EXAMPLE)!r})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('corral.sim'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == []
