"""The shell blocks of the repository's Markdown, and the commands in them.

The convention (also in docs/testing.md): a fenced block tagged ``sh``, ``console``, ``bash``
or ``shell`` holds commands, and the last non-blank line before its fence says how the docs
test treats it:

- nothing: run offline, from the repository root, with no cloud account and no local stack;
- ``<!-- run: local stack -->``: run against a local stack (``corral dev up``) the test starts
  once, in the order the blocks appear (README first, then docs/ by name);
- ``<!-- not run: REASON -->``: never run; the reason is printed in the test summary.

In a block whose lines start with ``$ ``, each such line is a command and the lines after it,
up to the next ``$ ``, are its expected output (stdout and stderr as a terminal shows them).
Otherwise every line is a command (a trailing ``\\`` continues it; ``#`` starts a comment).
A command must exit 0 unless its comment says ``exits N``. Placeholders (``<experiment-id>``,
``<trial-id>``, ``inst-...``) are filled from what the earlier commands created. A block that
is not tagged as shell and whose first line looks like a command is refused: tag it ``sh``
(and mark it), or ``text`` when it is not meant to be run as it stands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = frozenset({"sh", "console", "bash", "shell"})
_SKIP_DIRS = {"node_modules", "build", "test-artifacts", "corral.egg-info"}
_FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w+-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*(not run|run)\s*:\s*(.*?)\s*-->$")
_EXITS = re.compile(r"#.*\bexits (\d+)\b")
# Words a command line starts with; an untagged block starting with one is refused.
_COMMAND_START = re.compile(
    r"^(\$ |\.venv/|corral\b|corral-agent\b|make\b|python3?\b|pip\b|aws\b|sam\b|gcloud\b|"
    r"packer\b|chalice\b|infra/|[A-Z_]+=\S+ )"
)

Mode = Literal["offline", "stack", "excused"]


@dataclass(frozen=True, slots=True)
class Command:
    line: int  # 1-based line in the file
    text: str
    expected_output: str | None  # None: not shown, not compared
    expected_exit: int


@dataclass(frozen=True, slots=True)
class Block:
    file: str  # relative to the repository root
    line: int  # the opening fence, 1-based
    lang: str
    body: tuple[str, ...]
    mode: Mode | None  # None: the marker is malformed (see ``problem``)
    reason: str
    problem: str = ""

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"

    def commands(self) -> list[Command]:
        return _commands(self.body, self.line + 1)


def doc_files() -> list[Path]:
    """Every Markdown file of the repository (not the virtualenvs' or build outputs')."""
    found = []
    for path in sorted(ROOT.rglob("*.md")):
        parts = path.relative_to(ROOT).parts
        if any(p.startswith(".") or p in _SKIP_DIRS for p in parts[:-1]):
            continue
        found.append(path)
    return found


def fenced_blocks(path: Path) -> list[tuple[int, str, list[str], str]]:
    """(fence line, language, body lines, the last non-blank line before the fence)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[tuple[int, str, list[str], str]] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = match.groups()
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        found.append((i + 1, lang.lower(), body, before))
        i = j + 1
    return found


def shell_blocks() -> list[Block]:
    return [block for path in doc_files() for block in blocks_in(path)]


def blocks_in(path: Path) -> list[Block]:
    """The shell blocks of one Markdown file, each with how it is to be treated."""
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    blocks = []
    for line, lang, body, before in fenced_blocks(path):
        if lang not in SHELL_LANGS:
            continue
        mode, reason, problem = _mode(before)
        blocks.append(Block(rel, line, lang, tuple(body), mode, reason, problem))
    return blocks


def untagged_command_blocks() -> list[str]:
    """``file:line`` of blocks with no language whose first line looks like a command."""
    found = []
    for path in doc_files():
        for line, lang, body, _ in fenced_blocks(path):
            first = next((b.strip() for b in body if b.strip()), "")
            if not lang and _COMMAND_START.match(first):
                found.append(f"{path.relative_to(ROOT)}:{line}: {first[:60]}")
    return found


def _mode(before: str) -> tuple[Mode | None, str, str]:
    match = _MARKER.match(before)
    if match is None:
        return "offline", "", ""
    kind, reason = match.groups()
    if kind == "not run":
        if not reason:
            return None, "", "<!-- not run: --> needs a reason"
        return "excused", reason, ""
    if reason != "local stack":
        return None, "", f"unknown marker <!-- run: {reason} --> (only 'local stack')"
    return "stack", "", ""


def _commands(body: tuple[str, ...], first_line: int) -> list[Command]:
    if any(line.startswith("$ ") for line in body):
        return _prompt_commands(body, first_line)
    commands: list[Command] = []
    i = 0
    while i < len(body):
        start = i
        text, i = _logical_line(body, i, strip_prompt=False)
        if text.strip() and not text.lstrip().startswith("#"):
            commands.append(Command(first_line + start, text, None, _expected_exit(text)))
    return commands


def _prompt_commands(body: tuple[str, ...], first_line: int) -> list[Command]:
    commands: list[Command] = []
    i = 0
    while i < len(body):
        if not body[i].startswith("$ "):
            i += 1  # text before the first prompt
            continue
        start = i
        text, i = _logical_line(body, i, strip_prompt=True)
        output: list[str] = []
        while i < len(body) and not body[i].startswith("$ "):
            output.append(body[i])
            i += 1
        while output and not output[-1].strip():
            output.pop()
        shown = "\n".join(output) + "\n" if output else ""
        commands.append(Command(first_line + start, text, shown, _expected_exit(text)))
    return commands


def _logical_line(body: tuple[str, ...], i: int, *, strip_prompt: bool) -> tuple[str, int]:
    """One command from line ``i``: continuation lines and here-documents included."""
    parts = [body[i][2:] if strip_prompt else body[i]]
    i += 1
    while parts[-1].rstrip().endswith("\\") and i < len(body):
        parts.append(body[i])
        i += 1
    heredoc = re.search(r"<<-?\s*'?(\w+)'?", parts[0])
    if heredoc:
        while i < len(body):
            parts.append(body[i])
            i += 1
            if parts[-1].strip() == heredoc.group(1):
                break
    return "\n".join(parts), i


def split_comment(line: str) -> tuple[str, str]:
    """(code, comment) of one shell line: the comment starts at a ``#`` after a blank, outside
    quotes (enough for the docs' commands, not a shell parser)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


def code_of(text: str) -> str:
    """A command without its comments (the placeholders and the identity of a command)."""
    return "\n".join(split_comment(line)[0] for line in text.split("\n")).strip()


def _expected_exit(text: str) -> int:
    match = _EXITS.search(text)
    return int(match.group(1)) if match else 0
