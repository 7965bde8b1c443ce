"""The repository's Markdown points only inside the repository, at files and headings that
exist: a fresh clone elsewhere must find everything the docs name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.doc_blocks import ROOT, doc_files

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*```")
# Spellings of "outside the repository" that no doc may contain, whatever machine it is read on.
_OUTSIDE = [re.compile(r"\.\./shared\b"), re.compile(r"(?<![\w.])/work/")]

FILES = doc_files()


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_code = not in_code
            continue
        match = _HEADING.match(line)
        if match and not in_code:
            base = slug(match.group(1))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def _text_outside_code(path: Path) -> list[tuple[int, str]]:
    lines, in_code = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            in_code = not in_code
            continue
        if not in_code:
            lines.append((number, line))
    return lines


def test_slug_follows_github() -> None:
    assert slug("Determined compatibility: the rename table") == (
        "determined-compatibility-the-rename-table"
    )
    assert slug("AWS (`type: aws`)") == "aws-type-aws"
    assert slug("Networking (`infra/gcp/firewall.sh`)") == "networking-infragcpfirewallsh"


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_links_resolve_inside_the_repository(path: Path) -> None:
    broken = []
    for number, line in _text_outside_code(path):
        for match in [*_LINK.finditer(line), *_IMAGE.finditer(line)]:
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            if file_part.startswith("/"):
                broken.append(f"{number}: {target}: an absolute path")
                continue
            resolved = (path.parent / file_part).resolve() if file_part else path
            if not resolved.is_relative_to(ROOT):
                broken.append(f"{number}: {target}: outside the repository")
            elif not resolved.exists():
                broken.append(f"{number}: {target}: no such file")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{number}: {target}: no heading with that anchor")
    assert not broken, broken


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_nothing_points_outside_the_repository(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = [
        f"{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for pattern in [*_OUTSIDE, re.compile(re.escape(str(ROOT)))]
        for m in pattern.finditer(text)
    ]
    assert not found, f"{path.relative_to(ROOT)} names places outside the repository: {found}"
