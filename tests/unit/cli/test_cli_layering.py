"""Who imports whom between the CLI and the local stack, lazy imports included (read from
the source): the CLI's modules form no import cycle, and the local stack never imports the
CLI (a program that drives the stack, such as ``make demo``, is a CLI program:
``corral/cli/demo.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.infra.agent_imports import imports_of

ROOT = Path(__file__).resolve().parents[3]
CORRAL = ROOT / "functions" / "corral"


def _graph(package: str) -> dict[str, set[str]]:
    """``corral.<package>`` module -> the corral modules it imports (names as written)."""
    out: dict[str, set[str]] = {}
    for path in sorted((CORRAL / package).glob("*.py")):
        module = f"corral.{package}.{path.stem}".removesuffix(".__init__")
        found = {i.module for i in imports_of(path, module) if i.module.startswith("corral.")}
        found |= {
            f"{i.module}.{name}"
            for i in imports_of(path, module)
            if i.module in ("corral.cli", "corral.local")
            for name in i.names
        }
        out[module] = found
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_cli_modules_import_each_other_without_a_cycle() -> None:
    graph = _graph("cli")

    assert "corral.cli.client" in graph and "corral.cli.signing" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_local_stack_imports_nothing_of_the_cli() -> None:
    offenders = {
        module: sorted(i for i in imported if i.startswith("corral.cli"))
        for module, imported in _graph("local").items()
    }

    assert {m: i for m, i in offenders.items() if i} == {}


def test_the_demo_is_a_cli_program_make_demo_runs() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "$(BIN)/python -m corral.cli.demo\n" in makefile

    done = subprocess.run(
        [sys.executable, "-m", "corral.cli.demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "--experiment" in done.stdout and "--timeout" in done.stdout
