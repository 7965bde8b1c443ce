"""The Lambda package as `sam build` makes it, built offline for ``cold_start.py --package``.

``functions/Makefile`` (the build every function uses) downloads the wheels of
``functions/requirements.txt`` for the Lambda platform; here the same distributions are
copied from this environment instead (no network, and they must run on this machine), then
the Makefile copies the code and compiles it. A second copy without any ``.pyc`` is what
sam's default pip workflow used to ship.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "functions" / "requirements.txt"
MAKEFILE = REPO / "functions" / "Makefile"
# The Lambda runtime brings these (with its own bytecode); the package does not.
RUNTIME_PROVIDED = {"boto3", "botocore", "s3transfer"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(names: list[str]) -> list[metadata.Distribution]:
    """The distributions named and everything they require (no extras), minus the runtime's."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = _canonical(todo.pop())
        if name in seen or name in RUNTIME_PROVIDED:
            continue
        dist = metadata.distribution(name)
        seen[name] = dist
        for text in dist.requires or ():
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(seen.values())


def copy_requirements(dest: Path) -> None:
    """Copy the installed files of the requirements' distributions into ``dest``."""
    lines = [line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines()]
    for dist in _closure([Requirement(line).name for line in lines if line]):
        for file in dist.files or ():
            if "__pycache__" in file.parts or file.parts[0] == ".." or file.suffix == ".pyc":
                continue
            source = Path(str(dist.locate_file(file)))
            target = dest / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def build(dest: Path) -> tuple[Path, Path]:
    """``dest/compiled`` (the Makefile's package) and ``dest/source-only`` (no bytecode)."""
    compiled, source_only = dest / "compiled", dest / "source-only"
    compiled.mkdir(parents=True)
    copy_requirements(compiled)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(MAKEFILE),
            "package",
            f"LAMBDA_PYTHON={sys.executable}",
            f"LAMBDA_PYTHON_VERSION={version}",
            "CORRAL_INSTALL_DEPS=true",  # copied above
        ],
        env={**os.environ, "ARTIFACTS_DIR": str(compiled)},
        check=True,
    )
    shutil.copytree(compiled, source_only, ignore=shutil.ignore_patterns("__pycache__"))
    return compiled, source_only
