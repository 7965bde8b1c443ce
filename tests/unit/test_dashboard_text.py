"""The dashboard shows stored text as the CLI does: every string reaches the page as a text
node (never HTML) through ``visible`` in dom.js, which escapes what ``corral.domain.text.
visible`` escapes, the same way. Browser tests would be slow; dom.js's ``visible`` is plain
JavaScript, run here with node when it is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from corral.domain.text import visible

DASHBOARD = Path(__file__).resolve().parents[2] / "functions/corral/api/dashboard"
SAMPLES = [
    "plain name",
    "evil\x1b]0;pwned\x07\x1b[2J",
    "line\nforged\r\n\ttab",
    "\x00\x7f\x85\x9b31m",
    "abc\u202edcba \u2066x\u2069 \u2028\u2029",
    "lone \ud800 and \udfff, a pair \U0001f680",
    "Grüße 日本語 \u200b é",
]


def _own_scripts() -> list[Path]:
    return [p for p in DASHBOARD.glob("*.js") if not p.name.startswith("uPlot")]


def test_no_script_writes_html() -> None:
    for script in _own_scripts():
        source = script.read_text()
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", source), (
            script.name
        )


def test_every_string_child_goes_through_visible() -> None:
    source = (DASHBOARD / "dom.js").read_text()
    assert "document.createTextNode(visible(child))" in source
    assert source.count("createTextNode(") == 1  # the one place elements get text


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize("keep", ["", "\t", "\n\t"])
def test_the_page_escapes_as_the_cli_does(tmp_path: Path, keep: str) -> None:
    module = tmp_path / "dom.mjs"  # an ES module whatever node's default
    module.write_text((DASHBOARD / "dom.js").read_text())
    runner = tmp_path / "run.mjs"
    runner.write_text(
        f"import {{ visible }} from {json.dumps(str(module))};\n"
        "const [samples, keep] = JSON.parse(process.argv[2]);\n"
        "console.log(JSON.stringify(samples.map((s) => visible(s, keep))));\n"
    )
    # JSON escapes lone surrogates as \\udXXX, which JSON.parse turns back into them.
    argument = json.dumps([SAMPLES, keep])
    done = subprocess.run(
        ["node", str(runner), argument], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == [visible(s, keep=keep) for s in SAMPLES]
