"""The agent's imports against pyproject.toml, read statically (fast; the venv test in
test_agent_venv.py is the real proof): every third-party module the agent can reach, lazy
imports included, is a distribution the base dependencies or the ``agent`` extra declare by
name. Transitively present is not enough (botocore arrives with boto3, but the agent
imports it itself, so it is declared)."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from tests.infra.agent_imports import OWN, reachable_imports

ROOT = Path(__file__).resolve().parents[2]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", spec)
    assert match, spec
    return _normalise(match[0])


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *project["optional-dependencies"]["agent"]]
    return {_requirement_name(s) for s in specs}


def _third_party(optional: bool) -> set[str]:
    tops = {i.module.split(".")[0] for i in reachable_imports() if i.optional == optional}
    return {t for t in tops if t not in sys.stdlib_module_names and t not in OWN}


def test_every_module_the_agent_imports_is_declared_by_the_agent_extra() -> None:
    owners = metadata.packages_distributions()
    declared = _declared()
    required = _third_party(optional=False)

    missing = {
        top: sorted(_normalise(d) for d in owners.get(top, [top]))
        for top in sorted(required)
        if not declared & {_normalise(d) for d in owners.get(top, [top])}
    }
    assert missing == {}, f"imported by the agent, not declared in [agent] or the base: {missing}"
    # The walk reached the lazy imports (each is inside a function body).
    assert {"boto3", "botocore", "docker", "requests"} <= required


def test_the_agents_optional_imports_are_guarded_and_documented() -> None:
    """An import the extra leaves out must be optional by construction (``except
    ImportError`` with a fallback) and named in docs/agent.md."""
    optional = _third_party(optional=True) - _third_party(optional=False)
    doc = (ROOT / "docs" / "agent.md").read_text()

    assert optional == {"pynvml"}
    assert all(f"`{name}`" in doc for name in optional)
