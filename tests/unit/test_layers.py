"""The layers of docs/architecture.md, checked on the imports of every module (parsed, not
imported, so a lazy import inside a function counts too):

- the domain imports nothing of the services, the adapters or the API;
- the services and the domain never import the API (its view models, HTTP errors): the wire
  protocol they share with it is ``corral.protocol``;
- the agent runtime imports none of the control plane but the protocol.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORRAL = ROOT / "functions" / "corral"


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports, and ``module.name`` for each ``from module import name``
    (a relative import fails the test: none is used, and this check would miss it)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}: relative import of {node.module}"
            module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _violations(folder: Path, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        for name in sorted(_imports(path)):
            if any(name == f or name.startswith(f"{f}.") for f in forbidden):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        (CORRAL / "domain", ("corral.services", "corral.adapters", "corral.api")),
        (CORRAL / "services", ("corral.api",)),
        (CORRAL / "protocol", ("corral",)),
        # The agent shares only the wire protocol with the control plane.
        (
            ROOT / "agent_runtime",
            ("corral.services", "corral.api", "corral.adapters", "corral.domain"),
        ),
    ],
    ids=["domain", "services", "protocol", "agent_runtime"],
)
def test_layers_import_only_inward(folder: Path, forbidden: tuple[str, ...]) -> None:
    assert folder.is_dir()
    assert _violations(folder, forbidden) == []


def test_the_checker_sees_imports_inside_functions() -> None:
    names = _imports(CORRAL / "services" / "agents.py")
    assert "corral.protocol.agent" in names
    assert "corral.services.interruptions" in names  # imported inside ``heartbeat``
    assert _violations(CORRAL / "api", ("corral.services",))  # the API does use services
