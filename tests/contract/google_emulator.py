"""Google's emulators (Firestore, Pub/Sub) for the contract suite: discovery, start and stop.

One emulator of each kind per test session, started in the background as soon as the session
has cases for it (``prestart``), waited for on first use (``gcloud ... emulators <x> start`` on
a free loopback port, ready in 1-2 s) and stopped at the end of the session (or at exit).

Stopping: ``gcloud`` is a Python wrapper around a shell script around Java, and killing the
wrapper leaves Java running. The emulator finds the Java process among the wrapper's
descendants and stops it by its own PID, then reaps the wrapper (which exits with it).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

import pytest

READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found.extend(int(c) for c in task.read_text().split())
    return found


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def is_java(pid: int) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(argv0.decode(errors="replace")) == "java"


def missing_prerequisite(
    label: str, client_module: str, client_dist: str, component: str | None = None
) -> str | None:
    """Why the ``label`` emulator cannot run here (no gcloud, Java, gcloud ``component`` or
    Python client), or None."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        return f"gcloud is not installed (Google's {label} emulator comes with it)"
    if shutil.which("java") is None:
        return f"Java is not installed (the {label} emulator needs a JRE)"
    if component is not None:
        sdk = Path(os.path.realpath(gcloud)).parents[1]
        if not (sdk / "platform" / component).is_dir():
            return f"the gcloud component {component} is not installed under {sdk}"
    try:
        importlib.import_module(client_module)
    except ImportError:
        return f"{client_dist} is not installed (pip install 'corral[gcp]')"
    return None


class GoogleEmulator:
    """One emulator process: ``gcloud <command> --host-port=<free loopback port> --quiet``."""

    def __init__(self, label: str, command: Sequence[str]) -> None:
        self.label = label
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self._wrapper = subprocess.Popen(
            ["gcloud", *command, f"--host-port={self.host}", "--quiet"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.java_pids: list[int] = []

    def _java(self) -> list[int]:
        return [p for p in descendants(self._wrapper.pid) if is_java(p)]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._wrapper.poll() is not None:
                raise RuntimeError(f"the {self.label} emulator exited early:\n{self._output()}")
            try:
                with urllib.request.urlopen(f"http://{self.host}/", timeout=1) as reply:
                    if reply.status == 200:
                        self.java_pids = self._java()
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)  # waiting for a subprocess to boot, not for test time
        self.stop()
        raise RuntimeError(f"the {self.label} emulator was not ready in time:\n{self._output()}")

    def _output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def stop(self) -> None:
        pids = self.java_pids or self._java()
        for pid in pids:  # Java by its own PID: killing the wrapper would leave it running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            self._wrapper.wait(timeout=10)
        except subprocess.TimeoutExpired:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._wrapper.kill()
            self._wrapper.wait(timeout=5)
        self._log.close()


E = TypeVar("E", bound=GoogleEmulator)


class EmulatorSession(Generic[E]):
    """The session's one emulator of a kind: prestarted, waited for on first use, stopped."""

    def __init__(
        self,
        label: str,
        start: Callable[[], E],
        missing_prerequisite: Callable[[], str | None],
        on_stop: Callable[[], None] = lambda: None,
    ) -> None:
        self._label = label
        self._start = start
        self._missing_prerequisite = missing_prerequisite
        self._on_stop = on_stop  # e.g. forget the clients bound to the stopped emulator
        self._running: list[E] = []  # ready
        self._starting: list[E] = []  # started by prestart(), not yet waited for

    def prestart(self) -> None:
        """Start the emulator without waiting for it, so its JVM boots (~3 s) while other
        tests run; ``emulator()`` waits for it on first use. Does nothing when it cannot run."""
        if not self._running and not self._starting and self._missing_prerequisite() is None:
            started = self._start()
            atexit.register(started.stop)
            self._starting.append(started)

    def emulator(self) -> E:
        """The session's emulator, started on first use; skips the test when it cannot run."""
        if not self._running:
            reason = self._missing_prerequisite()
            if reason is not None:
                pytest.skip(reason)
            started = self._starting.pop() if self._starting else self._start()
            atexit.unregister(started.stop)
            atexit.register(started.stop)  # also when pytest is interrupted
            try:
                started.wait_ready()
            except RuntimeError as error:
                pytest.skip(f"the {self._label} emulator did not start: {error}")
            self._running.append(started)
        return self._running[0]

    def stop(self) -> None:
        """Called at the end of the session (conftest's session fixture)."""
        while self._running or self._starting:
            running = (self._running or self._starting).pop()
            atexit.unregister(running.stop)
            running.stop()
        self._on_stop()
