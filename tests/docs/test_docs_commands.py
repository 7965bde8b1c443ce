"""Every shell block of README.md and docs/ runs as shown, or says why it is not run.

The convention is in ``doc_blocks.py``. Offline blocks run from a directory that links every
top-level entry of the repository (so a command that writes a new file, such as
``corral sim --plot corral.png``, writes it there, not into the checkout) with no cloud
credentials and no local stack in reach. Local-stack blocks run against one stack started for
this module (timers 4x faster, 1 s boots, as the e2e tests), in document order; a command that
appeared before with the same text is not run twice. Excused blocks are skipped with their
reason, so ``pytest -ra`` lists them.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.docs.doc_blocks import (
    ROOT,
    Block,
    Command,
    code_of,
    shell_blocks,
    untagged_command_blocks,
)
from tests.e2e.local_stack import corral_json, running_stack

BLOCKS = shell_blocks()
OFFLINE = [b for b in BLOCKS if b.mode == "offline"]
STACK = [b for b in BLOCKS if b.mode == "stack"]
EXCUSED = [b for b in BLOCKS if b.mode == "excused"]
COMMAND_TIMEOUT_S = 120.0  # the longest: a grid experiment with --follow (about 30 s)
_PLACEHOLDER = re.compile(r"<[a-z][a-z-]*>|\binst-\.\.\.")
_EXPERIMENT = re.compile(r"\bexp-[0-9a-f]{8,}\b(?!\.)")
_TRIAL = re.compile(r"\bexp-[0-9a-f]{8,}\.t\d+\b")


def _ids(blocks: list[Block]) -> list[str]:
    return [b.id for b in blocks]


def test_every_shell_block_is_run_or_excused() -> None:
    malformed = [f"{b.id}: {b.problem}" for b in BLOCKS if b.mode is None]
    assert not malformed, malformed
    assert not untagged_command_blocks(), (
        "tag these ```sh (and mark them) or ```text: " + "; ".join(untagged_command_blocks())
    )
    assert OFFLINE and STACK, "the convention found no runnable block: is the parser broken?"


@pytest.mark.parametrize("block", EXCUSED, ids=_ids(EXCUSED))
def test_excused_block(block: Block) -> None:
    pytest.skip(f"{block.id}: not run: {block.reason}")


# --- running ---------------------------------------------------------------------------------


def _environment(dev_dir: Path) -> dict[str, str]:
    """This machine's environment without cloud settings, the venv first on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CORRAL_", "GOOGLE_", "CLOUDSDK_", "AWS_")) or k == "AWS_CA_BUNDLE"
    }
    venv_bin = str(Path(sys.executable).parent)
    env.update(
        PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        CORRAL_DEV_DIR=str(dev_dir),
        PYTHONUNBUFFERED="1",  # stdout and stderr interleave as on a terminal
        NO_COLOR="1",
        COLUMNS="100",
        TERM="dumb",
    )
    return env


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory linking every top-level entry of the repository."""
    where = tmp_path_factory.mktemp("docs-workdir")
    for entry in ROOT.iterdir():
        (where / entry.name).symlink_to(entry)
    return where


@dataclass
class Ran:
    exit_code: int
    output: str
    seconds: float


def _run(text: str, cwd: Path, env: dict[str, str]) -> Ran:
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", text],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"timed out after {COMMAND_TIMEOUT_S:.0f} s: {text}") from exc
    return Ran(done.returncode, done.stdout, time.monotonic() - started)


def _check(block: Block, command: Command, ran: Ran) -> None:
    where = f"{block.file}:{command.line}: {command.text}"
    if ran.exit_code != command.expected_exit:
        raise AssertionError(
            f"{where}\nexited {ran.exit_code}, the doc says {command.expected_exit}:\n"
            f"{ran.output[-3000:]}"
        )
    if command.expected_output is not None and ran.output != command.expected_output:
        diff = difflib.unified_diff(
            command.expected_output.splitlines(keepends=True),
            ran.output.splitlines(keepends=True),
            fromfile="shown in the doc",
            tofile="printed",
        )
        raise AssertionError(f"{where}\nprints something else:\n{''.join(diff)}")


@pytest.mark.parametrize("block", OFFLINE, ids=_ids(OFFLINE))
def test_offline_block_runs_as_shown(block: Block, workdir: Path, tmp_path: Path) -> None:
    env = _environment(tmp_path / "no-stack")  # no local stack there: nothing to reach
    for command in block.commands():
        assert not _PLACEHOLDER.search(code_of(command.text)), (
            f"{block.id}: offline commands cannot have placeholders: {command.text}"
        )
        _check(block, command, _run(command.text, workdir, env))


# --- the local stack -------------------------------------------------------------------------


@dataclass
class StackSession:
    dev_dir: Path
    env: dict[str, str]
    experiment_id: str | None = None
    trial_id: str | None = None
    done: dict[str, Ran] = field(default_factory=dict)

    def fill(self, block: Block, text: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group(0)
            if name == "<experiment-id>" and self.experiment_id:
                return self.experiment_id
            if name == "<trial-id>" and self.trial_id:
                return self.trial_id
            if name == "inst-...":
                return self.live_instance()
            raise AssertionError(
                f"{block.id}: no value for {name} (known: <experiment-id> and <trial-id> once "
                f"an earlier block created an experiment, inst-...); run the whole module"
            )

        return _PLACEHOLDER.sub(value, code_of(text))

    def live_instance(self) -> str:
        reply = corral_json(self.dev_dir, "agent", "list")
        live = [i["id"] for i in reply["instances"] if i.get("state") in ("IDLE", "BUSY")]
        assert live, f"no IDLE or BUSY instance to fill inst-... with: {reply}"
        return str(live[0])

    def learn(self, text: str, output: str) -> None:
        """Remember what a command created, for the placeholders of later commands."""
        if "experiment create" in text:
            found = _EXPERIMENT.search(output)
            if found:
                self.experiment_id = found.group(0)
                trial = _TRIAL.search(output)
                self.trial_id = trial.group(0) if trial else None


@pytest.fixture(scope="module")
def stack_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackSession]:
    base = tmp_path_factory.mktemp("docs-stack")
    with running_stack(base / "dev") as dev_dir:
        yield StackSession(dev_dir, _environment(dev_dir))


@pytest.mark.e2e
@pytest.mark.parametrize("block", STACK, ids=_ids(STACK))
def test_local_stack_block_runs_as_shown(
    block: Block, stack_session: StackSession, workdir: Path
) -> None:
    for command in block.commands():
        text = stack_session.fill(block, command.text)  # comments dropped
        ran = stack_session.done.get(text)
        if ran is None:  # else the same command ran earlier in the docs: its result stands
            ran = _run(text, workdir, stack_session.env)
            stack_session.done[text] = ran
            stack_session.learn(text, ran.output)
        _check(block, command, ran)
