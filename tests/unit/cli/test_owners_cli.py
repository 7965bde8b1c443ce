"""Owners and admins from the CLI: ``experiment list`` shows OWNER and filters with
``--mine``/``--owner``, ``describe`` shows the whole owner, ``pool reset-breaker`` is for
admins, and ``corral dev user add`` makes local-stack users whose tokens work at once."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corral.api.auth import TokenAuthenticator, token_digest
from corral.cli import experiment_cmd
from corral.cli.main import app
from corral.domain.config import ExperimentConfig
from corral.local.state import StateDir
from corral.services.submit import submit_experiment
from tests.services.harness import Cluster

from .test_cli_polish import rendered

SESSION = "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Dev/alice@example.com"


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _submit(cluster: Cluster, owner: str, name: str) -> str:
    config = ExperimentConfig.model_validate({"name": name, "entrypoint": "x"})
    cluster.clock.advance(1)
    return submit_experiment(cluster.ctx, config, owner=owner).experiment.id


def test_list_shows_owners_and_mine_filters(api: tuple[str, Cluster]) -> None:
    _, cluster = api
    mine = _submit(cluster, "me", "my-job")
    theirs = [_submit(cluster, SESSION, f"their-job-{n}") for n in range(3)]
    listed = cli("experiment", "list")
    assert listed.exit_code == 0, listed.output
    assert "OWNER" in listed.output and "AWSReservedSSO_Dev/alice@example.com" in listed.output
    only_mine = cli("experiment", "list", "--mine", "--limit", "1")
    assert only_mine.exit_code == 0, only_mine.output
    assert mine in only_mine.output and not any(t in only_mine.output for t in theirs)
    by_owner = json.loads(cli("experiment", "list", "--owner", SESSION, "--json").output)
    assert [e["id"] for e in by_owner["experiments"]] == theirs[::-1]
    described = cli("experiment", "describe", theirs[0])
    assert SESSION in described.output.replace("\n", "")  # the whole name, possibly folded


def test_killing_someone_elses_experiment_says_why(api: tuple[str, Cluster]) -> None:
    _, cluster = api
    theirs = _submit(cluster, SESSION, "their-job")
    result = cli("experiment", "kill", theirs)
    assert result.exit_code == 2
    said = result.output.replace("\n", "")
    assert f"belongs to {SESSION}" in said
    assert "check CORRAL_TOKEN" not in said  # the credentials are fine: the owner is not
    assert cluster.store.get_experiment(theirs).killed_at is None  # type: ignore[union-attr]


def test_unknown_credentials_point_at_the_token(
    api: tuple[str, Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_TOKEN", "not-a-token")
    result = cli("experiment", "list")
    assert result.exit_code == 2 and "check CORRAL_TOKEN" in result.output


def test_reset_breaker_is_for_admins(api: tuple[str, Cluster]) -> None:
    _, cluster = api
    state = cluster.store.pool_state("gpu")
    cluster.store.commit([replace(state, boot_failures=5, breaker_open_since=cluster.clock.now())])
    refused = cli("pool", "reset-breaker", "gpu")
    assert refused.exit_code == 2 and "only an admin may reset the breaker" in refused.output
    cluster.ctx.admins = ("me",)
    done = cli("pool", "reset-breaker", "gpu")
    assert done.exit_code == 0, done.output
    assert "pool gpu: breaker closed, 0 boot failure(s) counted" in done.output
    assert "breaker reset by me" in cli("events").output


def test_the_owner_column_fits_80_columns() -> None:
    rows = [
        {
            "id": "exp-0123456789abcdef",
            "name": "a-long-experiment-name",
            "state": "ACTIVE",
            "owner": SESSION,
            "trials_by_state": {"PENDING": 2, "RUNNING": 1},
            "cost_usd": 1.5,
        }
    ]
    text = rendered(experiment_cmd.EXPERIMENT_COLUMNS, rows, 80)
    assert all(len(line.rstrip()) <= 80 for line in text.splitlines()), text
    assert "OWNER" in text and "AWSReser" in text  # shortened (no arn:aws:sts::...), then cut
    assert "arn:aws" not in text
    wide = rendered(experiment_cmd.EXPERIMENT_COLUMNS, rows, 200)
    assert "AWSReservedSSO_Dev/alice@example.com" in wide


# ---- local-stack users ------------------------------------------------------------------------
@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateDir:
    monkeypatch.setenv("CORRAL_DEV_DIR", str(tmp_path / "dev"))
    return StateDir(tmp_path / "dev")


def test_dev_user_add_prints_a_token_the_api_accepts(state: StateDir) -> None:
    added = CliRunner().invoke(app, ["dev", "user", "add", "bob"])
    assert added.exit_code == 0, added.output
    token = added.stdout.strip()
    assert len(token) >= 32 and token not in state.users_file.read_text()
    (entry,) = json.loads(state.users_file.read_text())["users"]
    assert entry == {"name": "bob", "token_sha256": token_digest(token)}
    assert state.users_file.stat().st_mode & 0o077 == 0
    auth = TokenAuthenticator({}, None, state.users_file)
    event = {"headers": {"authorization": f"Bearer {token}"}}
    assert auth.authenticate(event).name == "bob"

    again = cli("dev", "user", "add", "bob")
    assert again.exit_code == 2 and "already exists" in again.output
    rotated = CliRunner().invoke(app, ["dev", "user", "add", "bob", "--rotate"])
    assert rotated.exit_code == 0 and rotated.stdout.strip() != token
    assert cli("dev", "user", "list").output.split() == ["bob"]


def test_rotating_the_default_users_token_keeps_the_cli_signed_in(state: StateDir) -> None:
    from corral.local.users import start_default_user

    start_default_user(state)
    rotated = CliRunner().invoke(app, ["dev", "user", "add", "local", "--rotate"])
    assert rotated.exit_code == 0, rotated.output
    assert state.token_file.read_text().strip() == rotated.stdout.strip()
    assert state.token_file.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("name", ["", "-dash", "with space", "a/b", "x" * 65])
def test_dev_user_add_refuses_bad_names(state: StateDir, name: str) -> None:
    result = cli("dev", "user", "add", "--", name)
    assert result.exit_code == 2 and "bad user name" in result.output
    assert not state.users_file.exists()
