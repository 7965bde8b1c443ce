"""``corral dev up`` refuses bad input before it starts anything, and reports a failed
background start from that start's own output only.

- A bad cluster config or template: every problem, from the validator, exit 2 (not the
  tail of a log that the background stack appends to across runs).
- ``--timer-scale``, ``--boot-delay`` and ``--port`` (also ``dashboard --port``) out of
  their range: a usage error naming the option and the range, exit 2.
- A background stack that exits while starting: only what it wrote this time, all of it
  (up to a limit), and its exit status 2 when it refused its input.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corral.cli import dev_cmd
from corral.cli.main import app
from corral.local.state import StateDir

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_CLUSTER = REPO / "examples" / "cluster.yaml"

# What earlier failed starts left in the log (the log is appended to, on purpose).
STALE = (
    "error: could not start the local stack: resource_pools[0].provider.max_instances: "
    "must be >= min_instances\n"
    "error: could not start the local stack: is empty\n"
    "2025-01-01 00:00:00,000 INFO corral.local.stack: signal 15: stopping\n"
)

# Six problems in two pools.
BAD_CLUSTER = """\
resource_pools:
  - name: a
    provider:
      type: aws
      region: us-east-1
      image_id: ami-0123456789abcdef0
      instance_type: g5.xlarge
      min_instances: 5
      max_instances: 1
      launch_error_retries: -1
      tag_key: k
      tag_value: v
  - name: b
    provider:
      type: aws
      region: us-east-1
      image_id: ami-bad
      instance_type: nope.xlarge
      min_instances: -1
      max_instances: 1
      max_idle_agent_period: banana
      tag_key: k
      tag_value: v
"""


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> StateDir:
    """A state dir whose stack.log holds earlier runs' errors, and no stack running."""
    state = StateDir(tmp_path / "dev")
    state.prepare()
    (state.logs / "stack.log").write_text(STALE)
    monkeypatch.setenv("CORRAL_DEV_DIR", str(state.root))
    monkeypatch.setenv("COLUMNS", "200")
    return state


def no_background_start(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    started: list[list[str]] = []

    def popen(argv: list[str], **kwargs: Any) -> Any:
        started.append(argv)
        raise AssertionError("a background stack was started")

    monkeypatch.setattr(dev_cmd.subprocess, "Popen", popen)
    return started


def test_every_problem_of_a_bad_config_is_shown_and_nothing_stale(
    state: StateDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_background_start(monkeypatch)
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_CLUSTER)
    validated = cli("config", "validate", str(bad))
    problems = [line.removeprefix(f"{bad}: ") for line in validated.output.splitlines()]
    assert validated.exit_code == 2 and len(problems) == 6, validated.output
    result = cli("dev", "up", "--detach", "--config", str(bad))
    assert result.exit_code == 2, result.output
    assert result.output == (f"error: {bad}: 6 problems:\n" + "".join(f"  {p}\n" for p in problems))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is empty"),
        ("- a\n", "must be a mapping, not a list"),
        (
            BAD_CLUSTER.replace("min_instances: -1", "min_instances: 0")
            .replace("launch_error_retries: -1", "")
            .replace("ami-bad", "ami-0123456789abcdef0")
            .replace("nope.xlarge", "g5.xlarge")
            .replace("banana", "5m"),
            "resource_pools[0].provider.max_instances: must be >= min_instances",
        ),
    ],
)
@pytest.mark.parametrize("detach", [True, False])
def test_a_config_with_one_problem_is_one_line(
    state: StateDir,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    says: str,
    detach: bool,
) -> None:
    no_background_start(monkeypatch)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = cli("dev", "up", *(["--detach"] if detach else []), "--config", str(bad))
    assert (result.exit_code, result.output) == (2, f"error: {bad}: {says}\n")


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("missing", "no such file"),
        ("directory", "is a directory, not a file"),
        ("no-resources", "not a CloudFormation template (no Resources)"),
        ("not-yaml", "invalid YAML at line 2, column 1:"),
    ],
)
def test_a_bad_template_is_refused_before_anything_starts(
    state: StateDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, template: str, says: str
) -> None:
    no_background_start(monkeypatch)
    path = tmp_path / "template.yaml"
    if template == "directory":
        path.mkdir()
    elif template == "no-resources":
        path.write_text("AWSTemplateFormatVersion: '2010-09-09'\n")
    elif template == "not-yaml":
        path.write_text("Resources: [\n")
    result = cli("dev", "up", "--detach", "--config", str(EXAMPLE_CLUSTER), "--template", str(path))
    out = result.output
    assert result.exit_code == 2, out
    assert out.startswith(f"error: {path}: {says}") and out.count("\n") == 1, out
    assert "signal 15" not in out and "could not start" not in out


def fake_stack(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """The background ``dev up`` replaced by ``script``, with the same output and env."""
    real = subprocess.Popen

    def popen(argv: list[str], **kwargs: Any) -> Any:
        assert argv[1:5] == ["-m", "corral.cli.main", "dev", "up"], argv
        return real([sys.executable, "-c", script], **kwargs)

    monkeypatch.setattr(dev_cmd.subprocess, "Popen", popen)


@pytest.mark.parametrize("code", [1, 2])
def test_a_failed_background_start_shows_only_its_own_output(
    state: StateDir, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    lines = [f"line {n} of this run" for n in range(1, 8)]
    fake_stack(monkeypatch, f"import sys; print({chr(10).join(lines)!r}); sys.exit({code})")
    result = cli("dev", "up", "--detach", "--config", str(EXAMPLE_CLUSTER))
    assert result.exit_code == code, result.output
    assert result.output == (
        "error: the stack exited while starting:\n" + "".join(f"  {line}\n" for line in lines)
    )
    # The log keeps every run's output.
    log = (state.logs / "stack.log").read_text()
    assert log.startswith(STALE) and log.endswith("line 7 of this run\n")


def test_a_long_failed_start_shows_its_last_lines_and_where_the_rest_is(
    state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_stack(monkeypatch, "for n in range(50): print('line', n)\nraise SystemExit(1)")
    result = cli("dev", "up", "--detach", "--config", str(EXAMPLE_CLUSTER))
    assert result.exit_code == 1, result.output
    shown = result.output.splitlines()
    assert shown[1] == f"  (... 30 earlier line(s) in {state.logs / 'stack.log'})"
    assert shown[2:] == [f"  line {n}" for n in range(30, 50)]


@pytest.mark.parametrize(
    ("args", "option", "says"),
    [
        (
            ["dev", "up", "--timer-scale", "0"],
            "--timer-scale",
            "0 is not in the range 0.01 to 1000",
        ),
        (["dev", "up", "--timer-scale", "-1"], "--timer-scale", "-1 is not in the range"),
        (["dev", "up", "--timer-scale", "nan"], "--timer-scale", "nan is not in the range"),
        (["dev", "up", "--timer-scale", "inf"], "--timer-scale", "inf is not in the range"),
        (["dev", "up", "--boot-delay", "-3"], "--boot-delay", "-3 is not in the range 0 to 86400"),
        (["dev", "up", "--boot-delay", "nan"], "--boot-delay", "nan is not in the range"),
        (["dev", "up", "--port", "70000"], "--port", "70000 is not in the range 0 to 65535"),
        (["dev", "up", "--port", "-5"], "--port", "-5 is not in the range 0 to 65535"),
        (["dashboard", "--port", "70000"], "--port", "70000 is not in the range 0 to 65535"),
        (["dashboard", "--port", "-5"], "--port", "-5 is not in the range 0 to 65535"),
    ],
)
def test_options_out_of_range_are_usage_errors(
    state: StateDir,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    option: str,
    says: str,
) -> None:
    no_background_start(monkeypatch)
    # The dashboard has an endpoint to proxy: the port is what is wrong.
    monkeypatch.setenv("CORRAL_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("CORRAL_TOKEN", "t")
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}': {says}" in result.output, result.output
    assert "internal" not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    "args", [["--timer-scale", "0.01", "--port", "65535"], ["--timer-scale", "1000"]]
)
def test_the_ends_of_a_range_are_accepted(
    state: StateDir, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    fake_stack(monkeypatch, "raise SystemExit(1)")  # got as far as starting the stack
    result = cli(
        "dev", "up", "--detach", "--config", str(EXAMPLE_CLUSTER), "--boot-delay", "0", *args
    )
    assert result.exit_code == 1 and "the stack exited while starting" in result.output
