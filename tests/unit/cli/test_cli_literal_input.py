"""What users and the API hand the CLI is taken literally: text with Rich markup in it is
printed as typed (never parsed, never a crash), ids go into request paths as one encoded
segment, and a config file that cannot be read is said the way ``config validate`` says it."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from corral.cli import render
from corral.cli.client import CliError
from corral.cli.main import app
from tests.services.harness import Cluster
from tests.unit.cli.test_cli_against_api import grid_config

# A closing tag nothing opened (Rich raises), a tag that would vanish, and both together.
MARKUP = ["[/x]", "[bold]X", "[blink red]a[/] [/nope]"]


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def markup_config(tmp_path: Path) -> Path:
    """The grid example with markup in its name and in hyperparameter values."""
    text = grid_config(tmp_path).read_text()
    text = text.replace("name: logreg-grid", f"name: {json.dumps(MARKUP[2])}")
    text = text.replace("vals: [32, 64]", f"vals: {json.dumps(MARKUP[:2])}")
    path = tmp_path / "markup.yaml"
    path.write_text(text)
    return path


# Defect 1: data is never Rich markup.


def test_markup_in_api_data_is_shown_as_typed(api: tuple[str, Cluster], tmp_path: Path) -> None:
    created = cli("experiment", "create", str(markup_config(tmp_path)))
    assert created.exit_code == 0, created.output
    assert f"({MARKUP[2]})" in created.output
    experiment = created.output.split()[2]
    trials = [f"{experiment}.t000{n}" for n in range(2)]  # batch_size "[/x]", "[bold]X"
    expected = {
        ("experiment", "list"): [MARKUP[2]],
        ("experiment", "describe", experiment): [MARKUP[2], *(f"={v} " for v in MARKUP[:2])],
        ("trial", "list", experiment): [f"batch_size={v} " for v in MARKUP[:2]],
        ("trial", "describe", trials[0]): [f"batch_size={MARKUP[0]} "],
        ("trial", "describe", trials[1]): [f"batch_size={MARKUP[1]} "],
    }
    for args, shown in expected.items():
        result = cli(*args)
        assert result.exit_code == 0, (args, result.output)
        assert all(text in result.output for text in shown), (args, result.output)


@pytest.mark.parametrize("text", MARKUP)
def test_markup_in_an_error_message_is_shown_as_typed(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(Exception) as raised, render.guard():
        raise CliError(f"no experiment exp-{text}", 2)
    assert getattr(raised.value, "exit_code", None) == 2
    assert capsys.readouterr().err == f"error: no experiment exp-{text}\n"


@pytest.mark.parametrize("text", MARKUP)
def test_markup_in_a_file_name_is_shown_as_typed(text: str, tmp_path: Path) -> None:
    missing = tmp_path / f"exp-{text}.yaml"
    result = cli("experiment", "create", str(missing))
    assert result.exit_code == 2
    assert result.output == f"error: {missing}: no such file\n"


def test_markup_in_every_cell_and_state_is_shown_as_typed() -> None:
    rows = [{"id": f"exp-{t}", "name": t, "state": t} for t in MARKUP]
    rows.append({"id": "exp-1", "name": ":thumbs_up:", "state": "RUNNING"})
    console = Console(width=200, record=True, highlight=False, color_system=None)
    saved = render.console
    render.console = console
    try:
        render.table(
            "Rows [/x]",
            [
                render.Col("ID", lambda r: r["id"], fit="keep"),
                render.Col("NAME", lambda r: r["name"]),
                render.Col("STATE", lambda r: render.state(r["state"]), fit="keep"),
            ],
            rows,
        )
        render.fields(f"Experiment exp-{MARKUP[0]}", [("name", MARKUP[2]), ("state", MARKUP[1])])
    finally:
        render.console = saved
    out = console.export_text()
    assert "Rows [/x]" in out and f"Experiment exp-{MARKUP[0]}" in out
    for text in MARKUP:
        assert f"exp-{text}" in out and f" {text} " in out
    assert ":thumbs_up:" in out and "RUNNING" in out
    assert render.state("RUNNING").style == "cyan"  # our own colours stay


# Defect 2: an id is one path segment.


@pytest.mark.parametrize("suffix", ["/trials", "?x=1", "#frag", " with spaces", "/../x"])
def test_an_id_reaches_the_api_as_one_segment(
    suffix: str, api: tuple[str, Cluster], tmp_path: Path
) -> None:
    created = json.loads(cli("experiment", "create", str(grid_config(tmp_path)), "--json").output)
    odd = created["id"] + suffix
    encoded = urllib.parse.quote(odd, safe="")  # as the API got it: its 404 echoes it
    for args in (
        ["experiment", "describe", odd],
        ["experiment", "kill", odd],
        ["trial", "list", odd],
    ):
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output == f"error: no experiment {encoded}\n", args
    for args in (["trial", "describe", odd], ["trial", "logs", odd], ["trial", "logs", "-f", odd]):
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output == f"error: no trial {encoded}\n", args
    assert cli("experiment", "describe", created["id"]).exit_code == 0  # it was not killed


def test_a_trial_id_naming_another_route_is_not_found(api: tuple[str, Cluster]) -> None:
    result = cli("trial", "logs", "exp-x.t0000/metrics?")
    assert (result.exit_code, result.output) == (2, "error: no trial exp-x.t0000%2Fmetrics%3F\n")


@pytest.mark.parametrize("ident", ["", ".", ".."])
def test_an_id_that_is_no_segment_is_refused(ident: str, api: tuple[str, Cluster]) -> None:
    result = cli("experiment", "describe", ident)
    assert (result.exit_code, result.output) == (2, f"error: bad ID {ident!r}\n")


def test_api_path_encodes_each_segment_whole() -> None:
    from corral.cli.client import api_path  # new with the fix: imported here, not above

    assert api_path("experiments", "exp-1", "trials") == "/experiments/exp-1/trials"
    assert api_path("trials", "a/b?c#d e%") == "/trials/a%2Fb%3Fc%23d%20e%25"


# Defect 3: a config file that cannot be read is said as `config validate` says it.


def unreadable(tmp_path: Path, kind: str) -> tuple[Path, str]:
    if kind == "missing":
        return tmp_path / "none.yaml", "no such file"
    if kind == "directory":
        (tmp_path / "dir.yaml").mkdir()
        return tmp_path / "dir.yaml", "is a directory, not a file"
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: x\ndescription: caf\xff\n")
    return path, "is not UTF-8 text"


@pytest.mark.parametrize("kind", ["missing", "directory", "not-utf8"])
@pytest.mark.parametrize(
    "command",
    [
        ["experiment", "create"],
        ["command", "run", "--config-file"],
        ["dev", "up", "--config"],
        ["config", "reference", "--check"],
    ],
)
def test_an_unreadable_config_file_is_said_as_config_validate_says_it(
    kind: str, command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing to reach: the file is read, and refused, before any request.
    monkeypatch.setenv("CORRAL_DEV_DIR", str(tmp_path / "dev"))
    monkeypatch.setenv("CORRAL_ENDPOINT", "http://127.0.0.1:9")
    path, reason = unreadable(tmp_path, kind)
    validated = cli("config", "validate", str(path))
    assert (validated.exit_code, validated.output) == (2, f"{path}: {reason}\n")
    argv = [*command, str(path)] + (["echo", "hi"] if command[0] == "command" else [])
    result = cli(*argv)
    prefix = "" if command[0] == "config" else "error: "
    assert (result.exit_code, result.output) == (2, f"{prefix}{path}: {reason}\n")
