"""``corral sim``: exit codes, the JSON keys, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from corral.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIG = str(EXAMPLES / "sim-cluster.yaml")
TRACE = str(EXAMPLES / "tiny-trace.csv")
KEYS = [
    "policy", "jobs", "completed", "rejected", "cost_usd", "oracle_cost_usd", "cost_ratio",
    "wait_p50_s", "wait_p95_s", "wait_max_s", "gpu_hours_used", "gpu_hours_paid",
    "idle_gpu_hours", "instances_launched", "spot_interruptions", "lost_gpu_hours",
    "restart_gpu_hours",
    "launch_failures", "on_demand_share", "idle_boot_gpu_hours", "idle_gang_gpu_hours",
    "idle_reaping_gpu_hours", "idle_fragmented_gpu_hours", "stopped_disk_usd",
]  # fmt: skip


def sim(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["sim", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_has_exactly_the_documented_keys() -> None:
    code, out, _ = sim("--trace", TRACE, "--config", CONFIG, "--json", "--policy", "determined")
    assert code == 0
    figures = json.loads(out)
    assert list(figures) == KEYS
    assert figures["policy"] == "determined" and figures["completed"] == 10


def test_jobs_no_pool_can_run_are_counted_as_rejected(tmp_path: Path) -> None:
    # 105 GPUs on one-GPU instances would take 105 instances, more than one gang may span;
    # the run dropped it without a word.
    config = tmp_path / "big.yaml"
    config.write_text(
        "resource_pools:\n  - name: big\n    provider: {type: aws, region: us-east-1,"
        " image_id: ami-0123456789abcdef0, instance_type: g5.xlarge, max_instances: 150}\n"
    )
    trace = tmp_path / "trace.csv"
    trace.write_text("submit_s,gpus,duration_s\n0,105,100\n0,2,100\n")
    code, out, _ = sim("--trace", str(trace), "--config", str(config), "--json")
    assert code == 0
    figures = json.loads(out)
    assert (figures["jobs"], figures["completed"], figures["rejected"]) == (2, 1, 1)


def test_table_without_json() -> None:
    code, out, _ = sim("--trace", TRACE, "--config", CONFIG, "--seed", "3")
    assert code == 0
    assert "cost_ratio" in out and "wait_p95_s" in out
    assert "idle_fragmented_gpu_hours" in out
    assert "on_demand_share" in out and "%" in out  # a share, shown as a percentage


def test_bad_trace_rows_exit_2_with_line_numbers(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("submit_s,gpus,duration_s\n0,x,5\n", encoding="utf-8")
    code, out, err = sim("--trace", str(bad), "--config", CONFIG)
    assert code == 2 and out == ""
    assert err.strip() == f"{bad}:2: gpus: must be a number, got 'x'"
    assert "Traceback" not in err


def test_bad_simulation_block_exits_2_naming_the_path(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    text = (EXAMPLES / "sim-cluster.yaml").read_text(encoding="utf-8")
    config.write_text(text.replace("seed: 0", "seed: 0\n  surprise: 1"), encoding="utf-8")
    code, _, err = sim("--trace", TRACE, "--config", str(config))
    assert code == 2
    assert err.strip() == "simulation.surprise: unknown field"


def test_missing_files_exit_2() -> None:
    code, _, err = sim("--trace", "nope.csv", "--config", CONFIG)
    assert code == 2 and err.strip() == "nope.csv: no such file"
    code, _, err = sim("--trace", TRACE, "--config", "nope.yaml")
    assert code == 2 and err.strip() == "nope.yaml: no such file"


def test_plot_writes_a_png(tmp_path: Path) -> None:
    target = tmp_path / "out.png"
    code, _, _ = sim("--trace", TRACE, "--config", CONFIG, "--plot", str(target), "--json")
    assert code == 0
    assert target.read_bytes()[:4] == b"\x89PNG"
