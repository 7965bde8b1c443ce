"""The CLI against the real API routes: the Powertools resolver with in-memory services,
served through the local stack's HTTP shim on loopback (tokens as in the local stack)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from tests.services.harness import Cluster

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def grid_config(tmp_path: Path) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text((EXAMPLES / "grid.yaml").read_text().replace("resource_pool: default", ""))
    return path


def test_create_list_describe_and_kill(api: tuple[str, Cluster], tmp_path: Path) -> None:
    result = cli("experiment", "create", str(grid_config(tmp_path)), "--json")
    assert result.exit_code == 0, result.output
    created = json.loads(result.output)
    assert created["trial_count"] == 4

    listed = cli("experiment", "list")
    assert listed.exit_code == 0 and created["id"] in listed.output
    described = cli("experiment", "describe", created["id"])
    assert described.exit_code == 0 and f"{created['id']}.t0000" in described.output
    trials = json.loads(cli("trial", "list", created["id"], "--json").output)["trials"]
    assert [t["state"] for t in trials] == ["PENDING"] * 4
    assert cli("trial", "describe", trials[0]["id"]).exit_code == 0
    assert cli("trial", "logs", trials[0]["id"]).exit_code == 0
    killed = cli("experiment", "kill", created["id"])
    assert killed.exit_code == 0 and created["id"] in killed.output


def test_fleet_reads(api: tuple[str, Cluster], tmp_path: Path) -> None:
    _, cluster = api
    cli("experiment", "create", str(grid_config(tmp_path)))
    cluster.pump()
    cluster.run(60)
    agents = json.loads(cli("agent", "list", "--json").output)["instances"]
    assert agents and all(a["pool"] == "gpu" for a in agents)
    assert "inst-" in cli("agent", "list").output
    assert "gpu" in cli("pool", "list").output
    events = cli("events")
    assert events.exit_code == 0 and "experiment_submitted" in events.output
    assert json.loads(cli("events", "--json").output)["events"]


def test_errors_are_one_line_with_a_nonzero_exit(
    api: tuple[str, Cluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = cli("experiment", "describe", "exp-nope")
    assert missing.exit_code == 2 and "Traceback" not in missing.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("entrypoint: python x.py\nresources: {slots_per_trial: -1}\n")
    invalid = cli("experiment", "create", str(bad))
    assert invalid.exit_code == 2 and "slots_per_trial" in invalid.output
    assert cli("experiment", "create", str(tmp_path / "none.yaml")).exit_code == 2
    monkeypatch.setenv("CORRAL_TOKEN", "wrong")
    refused = cli("experiment", "list")
    assert refused.exit_code == 2 and "token" in refused.output.lower()
    monkeypatch.setenv("CORRAL_ENDPOINT", "http://127.0.0.1:9")
    unreachable = cli("agent", "list")
    assert unreachable.exit_code == 1 and "cannot reach" in unreachable.output
    monkeypatch.delenv("CORRAL_ENDPOINT")
    nowhere = cli("pool", "list")
    assert nowhere.exit_code == 1 and "corral dev up" in nowhere.output


def test_events_limit_prints_that_many(api: tuple[str, Cluster], tmp_path: Path) -> None:
    _, cluster = api
    for _ in range(3):
        cli("experiment", "create", str(grid_config(tmp_path)))
    cluster.pump()
    cluster.run(60)
    everything = cli("events", "--limit", "1000").output.splitlines()
    assert len(everything) > 5
    three = cli("events", "--limit", "3")
    assert three.exit_code == 0
    assert three.output.splitlines() == everything[:3]
