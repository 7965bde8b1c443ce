"""functions/Makefile, the build `sam build` runs for every function: a target per function,
the code copied without the developer's caches, and every module compiled to a hash-based
.pyc the runtime uses without reading the source.

The dependency step (pip downloading wheels for the Lambda platform) needs PyPI, so these
tests replace it (``CORRAL_INSTALL_DEPS=true``) and compile with this interpreter; the version guard
is tested on its own.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corral.local.template import parse_template

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "functions" / "Makefile"
TEMPLATE = ROOT / "infra" / "template.yaml"
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _functions() -> dict[str, dict[str, object]]:
    resources = parse_template(TEMPLATE.read_text())["Resources"]
    return {k: v for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"}


def _make(target: str, artifacts: Path, **overrides: str) -> subprocess.CompletedProcess[str]:
    settings = {
        "LAMBDA_PYTHON": sys.executable,
        "LAMBDA_PYTHON_VERSION": HERE,
        "CORRAL_INSTALL_DEPS": "true",
    }
    args = [f"{k}={v}" for k, v in (settings | overrides).items()]
    return subprocess.run(
        ["make", "--no-print-directory", "-f", str(MAKEFILE), target, *args],
        env={**os.environ, "ARTIFACTS_DIR": str(artifacts)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_makefile_builds_for_the_templates_runtime_and_architecture() -> None:
    globals_ = parse_template(TEMPLATE.read_text())["Globals"]["Function"]
    text = MAKEFILE.read_text()
    (arch,) = globals_["Architectures"]
    platform = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}[arch]
    version = globals_["Runtime"].removeprefix("python")

    assert f"LAMBDA_PLATFORM ?= {platform}\n" in text
    assert f"LAMBDA_PYTHON_VERSION ?= {version}\n" in text
    assert f"LAMBDA_PYTHON ?= python{version}\n" in text


def test_every_function_is_built_by_the_makefile() -> None:
    functions = _functions()

    assert functions
    for name, resource in functions.items():
        assert resource.get("Metadata", {}).get("BuildMethod") == "makefile", name  # type: ignore[union-attr]


@pytest.mark.parametrize("name", sorted(_functions()))
def test_the_makefile_has_each_functions_target(name: str, tmp_path: Path) -> None:
    dry = subprocess.run(
        ["make", "-n", "-f", str(MAKEFILE), f"build-{name}", f"ARTIFACTS_DIR={tmp_path}"],
        capture_output=True,
        text=True,
        check=False,
    )

    assert dry.returncode == 0, dry.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    artifacts = tmp_path_factory.mktemp("artifacts")
    done = _make("build-ScheduleFunction", artifacts)
    assert done.returncode == 0, done.stderr
    return artifacts


def test_the_code_is_copied_without_the_developers_caches(built: Path) -> None:
    sources = sorted(
        p.relative_to(ROOT / "functions")
        for p in (ROOT / "functions" / "corral").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    copied = sorted(
        p.relative_to(built)
        for p in (built / "corral").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )

    assert copied == sources
    tag = sys.implementation.cache_tag
    stray = [p for p in (built / "corral").rglob("*.pyc") if f".{tag}." not in p.name]
    assert stray == []  # no .pyc of another Python came along from the source tree


def test_every_module_has_an_unchecked_hash_pyc(built: Path) -> None:
    modules = list((built / "corral").rglob("*.py"))

    assert len(modules) > 100
    for module in modules:
        cached = Path(importlib.util.cache_from_source(str(module)))
        flags = int.from_bytes(cached.read_bytes()[4:8], "little")
        assert flags == 0b01, module  # PEP 552: hash-based, not checked against the source


def test_the_runtime_imports_the_pyc_without_reading_the_source(built: Path) -> None:
    # Unchecked: a source changed after the build is not even looked at, so a handler that
    # still imports proves the .pyc was used (as /var/task is, nothing writes bytecode).
    init = built / "corral" / "__init__.py"
    init.write_text(init.read_text() + "\nraise SystemExit('read the source')\n")

    imported = subprocess.run(
        [sys.executable, "-B", "-c", "import corral.handlers.aws.schedule"],
        env={**os.environ, "PYTHONPATH": str(built)},
        cwd=built,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert imported.returncode == 0, imported.stderr


def test_another_python_is_refused_with_a_reason(tmp_path: Path) -> None:
    done = _make("build-ApiFunction", tmp_path, LAMBDA_PYTHON_VERSION="3.99")

    assert done.returncode != 0
    assert f"is Python {HERE}: the .pyc must be compiled by the runtime's Python, 3.99" in (
        done.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_a_build_without_artifacts_dir_is_refused() -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "-f", str(MAKEFILE), "build-ApiFunction"],
        env={k: v for k, v in os.environ.items() if k != "ARTIFACTS_DIR"},
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode != 0
    assert "ARTIFACTS_DIR is not set" in done.stderr
