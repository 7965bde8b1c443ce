"""Every import the agent can reach, found by reading its source: module-level and lazy
imports alike (boto3 is imported only on the first signed request or CloudWatch call, so
importing each module proves nothing about it), in ``agent_runtime`` and in every ``corral``
module it imports, transitively.

An import inside ``try: ... except ImportError`` is optional by design (NVML falls back to
``nvidia-smi``) and is listed apart. Standard library only: ``test_agent_venv.py`` runs this
file with the agent venv's interpreter (``python -I``), where it imports each one and prints
what failed, as JSON.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT_PACKAGE = "agent_runtime"
OWN = ("agent_runtime", "corral")
OPTIONAL_ERRORS = {"ImportError", "ModuleNotFoundError"}


@dataclass(frozen=True)
class Import:
    module: str  # absolute dotted name
    names: tuple[str, ...]  # the names of ``from module import a, b``; () for ``import module``
    optional: bool  # inside ``try`` with an ``except ImportError``
    where: str  # file:line, for the report


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type
    elts = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    return any(isinstance(e, ast.Name) and e.id in OPTIONAL_ERRORS for e in elts)


def _module_name(path: Path, package_dir: Path, package: str) -> str:
    parts = list(path.relative_to(package_dir).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def imports_of(path: Path, module: str) -> list[Import]:
    """The imports of one source file, relative ones made absolute."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, optional: bool) -> None:
        if isinstance(node, ast.Try):
            guarded = optional or any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, guarded)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, optional)
            return
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found.extend(Import(a.name, (), optional, where) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            if base != "__future__":
                found.append(Import(base, tuple(a.name for a in node.names), optional, where))
        for child in ast.iter_child_nodes(node):
            visit(child, optional)

    visit(tree, False)
    return found


def _source_of(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:  # ``from pkg.mod import Name``: ``pkg.mod.Name`` is no module
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _parents(module: str) -> list[str]:
    """Importing ``a.b.c`` runs ``a`` and ``a.b`` first."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def reachable_imports() -> list[Import]:
    """The imports of every file of ``agent_runtime`` and of each ``corral`` module reached
    from them (with its parent packages), following own modules transitively."""
    spec = importlib.util.find_spec(ROOT_PACKAGE)
    assert spec and spec.submodule_search_locations, f"{ROOT_PACKAGE} is not importable"
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    todo = [(p, _module_name(p, package_dir, ROOT_PACKAGE)) for p in package_dir.rglob("*.py")]
    seen = {name for _, name in todo}
    out: list[Import] = []
    while todo:
        path, module = todo.pop()
        for imp in imports_of(path, module):
            out.append(imp)
            if imp.module.split(".")[0] not in OWN:
                continue
            candidates = _parents(imp.module) + [f"{imp.module}.{n}" for n in imp.names]
            for name in candidates:
                if name in seen:
                    continue
                source = _source_of(name)
                if source is not None:
                    seen.add(name)
                    todo.append((source, name))
    return out


def import_failures(imports: list[Import]) -> list[str]:
    """Each required import done for real here; one line per failure."""
    failures = []
    for imp in imports:
        if imp.optional:
            continue
        try:
            mod = importlib.import_module(imp.module)
            for name in imp.names:
                if not hasattr(mod, name):
                    importlib.import_module(f"{imp.module}.{name}")
        except Exception as exc:
            failures.append(f"{imp.where}: {imp.module} {list(imp.names)}: {exc!r}")
    return sorted(set(failures))


def main() -> int:
    imports = reachable_imports()
    report = {
        "checked": sorted({i.module for i in imports if not i.optional}),
        "optional": sorted({i.module for i in imports if i.optional}),
        "failures": import_failures(imports),
    }
    print(json.dumps(report))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
