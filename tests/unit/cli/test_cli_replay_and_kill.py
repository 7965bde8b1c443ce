"""What ``experiment create --client-token`` and ``experiment kill`` say they did, against the
real API routes: a replayed submission is not reported as a new experiment, a token reused
with another config is refused with the API's reason, and killing what had already ended
says so (and still exits 0: a kill is idempotent)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from corral.cli.main import app
from tests.services.harness import Cluster
from tests.unit.cli.test_cli_against_api import grid_config


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def one_trial_config(tmp_path: Path) -> Path:
    path = tmp_path / "one.yaml"
    path.write_text("name: solo\nentrypoint: python train.py\n")
    return path


def test_a_replayed_client_token_is_not_reported_as_created(
    api: tuple[str, Cluster], tmp_path: Path
) -> None:
    _, cluster = api
    config = str(grid_config(tmp_path))
    first = cli("experiment", "create", config, "--client-token", "tok-1")
    assert first.exit_code == 0, first.output
    created = re.fullmatch(
        r"created experiment (exp-\S+) \(logreg-grid\): 4 trial\(s\) in pool gpu\n", first.output
    )
    assert created, first.output
    again = cli("experiment", "create", config, "--client-token", "tok-1")
    assert again.exit_code == 0, again.output
    assert again.output == (
        f"experiment {created.group(1)} (logreg-grid) was already submitted with this client "
        "token: 4 trial(s) in pool gpu\n"
    )
    assert len(cluster.store.experiments(limit=10)) == 1
    # Without a token every submission is new, and said to be.
    fresh = cli("experiment", "create", config)
    assert fresh.exit_code == 0 and fresh.output.startswith("created experiment "), fresh.output


def test_a_client_token_reused_with_another_config_is_refused(
    api: tuple[str, Cluster], tmp_path: Path
) -> None:
    _, cluster = api
    assert (
        cli("experiment", "create", str(grid_config(tmp_path)), "--client-token", "t").exit_code
        == 0
    )
    other = cli("experiment", "create", str(one_trial_config(tmp_path)), "--client-token", "t")
    out = other.output.strip()
    assert other.exit_code == 2, out
    assert out.startswith("error: ") and "client_token" in out and "\n" not in out, out
    assert "Traceback" not in out and "created" not in out
    assert len(cluster.store.experiments(limit=10)) == 1


def test_killing_a_completed_experiment_says_it_had_already_ended(
    api: tuple[str, Cluster], tmp_path: Path
) -> None:
    _, cluster = api
    created = json.loads(
        cli("experiment", "create", str(one_trial_config(tmp_path)), "--json").output
    )
    cluster.pump()
    cluster.run(300)
    assert (
        json.loads(cli("experiment", "describe", created["id"], "--json").output)["state"]
        == "COMPLETED"
    )
    killed = cli("experiment", "kill", created["id"])
    assert killed.exit_code == 0, killed.output
    assert killed.output == (
        f"experiment {created['id']} had already ended: COMPLETED (nothing to kill)\n"
    )
    # Nothing was written: no kill recorded on an experiment that completed by itself.
    record = cluster.store.get_experiment(created["id"])
    assert record is not None and record.killed_at is None


def test_killing_twice_says_the_second_kill_found_it_ended(
    api: tuple[str, Cluster], tmp_path: Path
) -> None:
    created = json.loads(cli("experiment", "create", str(grid_config(tmp_path)), "--json").output)
    first = cli("experiment", "kill", created["id"])
    assert (first.exit_code, first.output) == (0, f"experiment {created['id']}: CANCELLED\n")
    second = cli("experiment", "kill", created["id"])
    assert (second.exit_code, second.output) == (
        0,
        f"experiment {created['id']} had already ended: CANCELLED (nothing to kill)\n",
    )
    as_json = cli("experiment", "kill", created["id"], "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.output)["state"] == "CANCELLED"


def test_killing_an_ended_command_names_it_a_command(api: tuple[str, Cluster]) -> None:
    ran = cli("command", "run", "--detach", "--json", "--", "echo", "hi")
    assert ran.exit_code == 0, ran.output
    command_id = json.loads(ran.output)["id"]
    assert cli("experiment", "kill", command_id).exit_code == 0
    again = cli("experiment", "kill", command_id)
    assert (again.exit_code, again.output) == (
        0,
        f"command {command_id} had already ended: CANCELLED (nothing to kill)\n",
    )
