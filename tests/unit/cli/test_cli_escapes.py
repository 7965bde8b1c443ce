"""Stored text cannot drive the reader's terminal: records written before the API refused
control characters (or a trial's own output) are printed with them escaped, ``\\x1b`` instead
of ESC, by every command that shows them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from corral.cli.main import app
from corral.domain.records import Event, EventKind, LogLine
from tests.services.harness import Cluster

# Clear the screen, retitle the window (OSC ... BEL), a CSI as one C1 byte, a forged newline
# and a right-to-left override.
EVIL = "ok\x1b[2J\x1b]0;pwned\x07\x9b31m\nfake\u202eevil"
ESCAPED = "ok\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\nfake\\u202eevil"


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _raw_controls(output: str) -> list[str]:
    """The control characters in ``output`` other than the newlines that end its lines."""
    return [c for c in output if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F]


def _stored_with_evil_name(cluster: Cluster) -> str:
    # As an old record: written by the service, not through the API (which refuses it now).
    return cluster.submit(name=EVIL).experiment.id


def test_experiment_list_shows_an_old_name_escaped(api: tuple[str, Cluster]) -> None:
    _, cluster = api
    _stored_with_evil_name(cluster)
    result = cli("experiment", "list")
    assert result.exit_code == 0, result.output
    assert ESCAPED in result.output
    assert _raw_controls(result.output) == [] and "\u202e" not in result.output


def test_experiment_describe_and_its_trials_are_escaped(api: tuple[str, Cluster]) -> None:
    _, cluster = api
    experiment = _stored_with_evil_name(cluster)
    result = cli("experiment", "describe", experiment)
    assert result.exit_code == 0, result.output
    assert ESCAPED in result.output
    assert _raw_controls(result.output) == []


def test_trial_logs_escape_control_characters_but_tab(api: tuple[str, Cluster]) -> None:
    _, cluster = api
    experiment = cluster.submit().experiment.id
    trial = f"{experiment}.t0000"
    lines = ["plain\tcolumns", "\x1b[31mred\x1b[0m", "progress 50%\rprogress 100%"]
    cluster.store.append_logs(
        [LogLine(trial_id=trial, seq=i, at=0.0, line=line) for i, line in enumerate(lines)]
    )
    result = cli("trial", "logs", trial)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "plain\tcolumns",
        "\\x1b[31mred\\x1b[0m",
        "progress 50%\\rprogress 100%",
    ]


def test_events_are_one_escaped_line_each(api: tuple[str, Cluster]) -> None:
    _, cluster = api
    cluster.store.append_events(
        [Event(at=cluster.clock.now(), kind=EventKind.EXPERIMENT_SUBMITTED, message=EVIL)]
    )
    result = cli("events")
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if "pwned" in line]
    assert ESCAPED in line
    assert _raw_controls(result.output) == []


def test_config_validate_names_a_key_with_control_characters_escaped(tmp_path: Path) -> None:
    config = tmp_path / "exp.yaml"
    config.write_text('entrypoint: x\n"bad\\e[2Jkey": 1\nname: "n\\e]0;t\\a"\n')
    result = cli("config", "validate", str(config), "--kind", "experiment")
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        "name: must not contain control characters (\\x1b at character 2)",
        "bad\\x1b[2Jkey: unknown field",
    ]
