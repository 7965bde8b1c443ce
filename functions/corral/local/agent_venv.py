"""The agent the local stack's machines run: what their image has at ``/opt/corral-agent``.

As ``infra/agent-image/scripts/install-agent.sh`` makes it: the project's wheel installed
with its ``agent`` extra into a venv of its own, then ``corral-agent --help`` run once. So
the machines run what the image would, with the extra's dependencies only (never the
developer's venv), and a missing dependency fails here as it would on an instance.

The wheel is built from this checkout on every ``corral dev up`` (a few seconds); the venv
is cached by the wheel's content (``~/.cache/corral/agent-venvs/<digest>``, or
``$CORRAL_AGENT_VENV_CACHE``), so a stack whose code did not change reuses it and only a
change builds a new one (about 15 s, pip's cache warm). Builds take a lock: stacks
started together build once. The last few venvs are kept.

Without a checkout (corral installed from a wheel), ``developer_agent`` runs the agent from
the stack's own interpreter instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_ENV = "CORRAL_AGENT_VENV_CACHE"
KEEP = 3  # venvs kept in the cache (the newest by use)
_DONE = ".corral-complete"  # written last: a venv without it is a build that did not finish
_PIP_TIMEOUT_S = 600.0


class AgentInstallError(RuntimeError):
    """The agent could not be installed (the message says which step, and its output)."""


def default_cache() -> Path:
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "corral" / "agent-venvs"


def project_root() -> Path | None:
    """This checkout (editable install), or None when corral was installed from a wheel."""
    root = Path(__file__).resolve().parents[3]
    return (
        root if (root / "pyproject.toml").is_file() and (root / "agent_runtime").is_dir() else None
    )


def wheel_digest(wheel: Path) -> str:
    """The wheel's content (member names and bytes), not its file: zip timestamps change
    with every build of the same code."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(archive.namelist()):
            digest.update(name.encode() + b"\0")
            digest.update(hashlib.sha256(archive.read(name)).digest())
    return digest.hexdigest()[:16]


def agent_install(root: Path, cache: Path | None = None) -> Path:
    """The venv of this checkout's agent: cached, or built now."""
    cache = cache or default_cache()
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".lock"), tempfile.TemporaryDirectory(prefix="corral-wheel-") as tmp:
        started = time.monotonic()
        wheel = build_wheel(root, Path(tmp))
        venv = cache / wheel_digest(wheel)
        if (venv / _DONE).is_file():
            (venv / _DONE).touch()  # most recently used: kept by the pruning
            log.info(
                "agent venv %s (cached; wheel built in %.1f s)", venv, time.monotonic() - started
            )
            return venv
        shutil.rmtree(venv, ignore_errors=True)  # a build that did not finish
        log.info("installing the agent into %s (first time for this code)", venv)
        install(wheel, venv)
        (venv / _DONE).write_text(wheel.name + "\n")
        log.info("agent venv %s built in %.1f s", venv, time.monotonic() - started)
        _prune(cache, keep=venv)
        return venv


def build_wheel(root: Path, out: Path) -> Path:
    """``pip wheel`` of the checkout, with the stack's own setuptools (no download)."""
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
          "-w", str(out), str(root)], "building the project's wheel")  # fmt: skip
    wheels = sorted(out.glob("corral-*.whl"))
    if len(wheels) != 1:
        raise AgentInstallError(f"building the project's wheel left {len(wheels)} wheels in {out}")
    return wheels[0]


def install(wheel: Path, venv: Path) -> None:
    """What install-agent.sh does on the image: a venv, ``corral[agent]`` from the wheel,
    and the agent's ``--help`` as the check (its pip upgrade is left out)."""
    # The stack's own pip installs into it (``--python``): no pip of its own to bootstrap,
    # and no bytecode compiled ahead (botocore's alone took longer than everything else; the
    # agent compiles what it imports). 45 s became 13 s on two cores, pip's cache warm.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "creating the agent venv")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    _run([*pip, "--quiet", "--no-compile", f"{wheel}[agent]"], "installing corral[agent]")
    _run([str(venv / "bin" / "corral-agent"), "--help"], "checking the installed agent")


def developer_agent(directory: Path) -> Path:
    """An install whose ``bin/corral-agent`` runs ``agent_runtime.main`` from the stack's
    interpreter and path (the developer's venv)."""
    script = directory / "bin" / "corral-agent"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m agent_runtime.main "$@"\n')
    script.chmod(0o755)
    return directory


def _run(command: list[str], what: str) -> None:
    # The developer's PYTHONPATH must not leak into the venv's interpreter or pip.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=_PIP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise AgentInstallError(f"{what}: {error}") from error
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise AgentInstallError(f"{what} failed ({done.returncode}): " + " | ".join(tail))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _prune(cache: Path, keep: Path) -> None:
    """Keep the newest ``KEEP`` venvs by use (a stack running an older one keeps its
    processes: their files are open, and a new stack builds again if it needs it)."""
    built = [p for p in cache.iterdir() if (p / _DONE).is_file()]
    built.sort(key=lambda p: (p / _DONE).stat().st_mtime, reverse=True)
    for old in built[KEEP:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
