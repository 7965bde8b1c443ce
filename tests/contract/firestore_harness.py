"""Google's Firestore emulator for the contract suite (registered in conftest.py).

One emulator per test session, started in the background as soon as the session has
firestore cases to run (``prestart``), waited for on first use (``gcloud emulators firestore start``
on a free loopback port, ready in 1-2 s) and stopped at exit. Each store starts empty: the
emulator's ``DELETE .../documents`` endpoint wipes the project (a few ms), so the property
test can build one store per example. One client is shared by every store.

Stopping: ``gcloud`` is a Python wrapper around a shell script around Java, and killing the
wrapper leaves Java running. The harness finds the Java process among the wrapper's
descendants and stops it by its own PID, then reaps the wrapper (which exits with it).

Skips (with the reason) when ``gcloud``, Java or the emulator component is missing.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from corral.ports.store import Store

PROJECT = "corral-contract"
READY_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found.extend(int(c) for c in task.read_text().split())
    return found


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def _is_java(pid: int) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(argv0.decode(errors="replace")) == "java"


class Emulator:
    def __init__(self) -> None:
        self.port = _free_port()
        self.host = f"127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self._wrapper = subprocess.Popen(
            ["gcloud", "emulators", "firestore", "start", f"--host-port={self.host}", "--quiet"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.java_pids: list[int] = []

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._wrapper.poll() is not None:
                raise RuntimeError(f"the Firestore emulator exited early:\n{self._output()}")
            try:
                with urllib.request.urlopen(f"http://{self.host}/", timeout=1) as reply:
                    if reply.status == 200:
                        self.java_pids = [p for p in _descendants(self._wrapper.pid) if _is_java(p)]
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the Firestore emulator was not ready in time:\n{self._output()}")

    def _output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def reset(self) -> None:
        url = f"http://{self.host}/emulator/v1/projects/{PROJECT}/databases/(default)/documents"
        request = urllib.request.Request(url, method="DELETE")
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()

    def stop(self) -> None:
        pids = self.java_pids or [p for p in _descendants(self._wrapper.pid) if _is_java(p)]
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


_emulator: list[Emulator] = []  # ready
_starting: list[Emulator] = []  # started by prestart(), not yet waited for
_client: list[Any] = []


def _missing_prerequisite() -> str | None:
    if shutil.which("gcloud") is None:
        return "gcloud is not installed (Google's Firestore emulator comes with it)"
    if shutil.which("java") is None:
        return "Java is not installed (the Firestore emulator needs a JRE)"
    try:
        import google.cloud.firestore  # noqa: F401
    except ImportError:
        return "google-cloud-firestore is not installed (pip install 'corral[gcp]')"
    return None


def prestart() -> None:
    """Start the emulator without waiting for it, so its JVM boots (~3 s) while other tests
    run; ``emulator()`` waits for it on first use. Does nothing when it cannot run."""
    if not _emulator and not _starting and _missing_prerequisite() is None:
        started = Emulator()
        atexit.register(started.stop)
        _starting.append(started)


def emulator() -> Emulator:
    """The session's emulator, started on first use; skips the test when it cannot run."""
    if not _emulator:
        reason = _missing_prerequisite()
        if reason is not None:
            pytest.skip(reason)
        started = _starting.pop() if _starting else Emulator()
        atexit.unregister(started.stop)
        atexit.register(started.stop)  # also when pytest is interrupted
        try:
            started.wait_ready()
        except RuntimeError as error:
            pytest.skip(f"the Firestore emulator did not start: {error}")
        _emulator.append(started)
    return _emulator[0]


def stop_emulator() -> None:
    """Called at the end of the session (conftest's session fixture)."""
    while _emulator or _starting:
        running = (_emulator or _starting).pop()
        atexit.unregister(running.stop)
        running.stop()
    _client.clear()


def firestore_client() -> Any:
    running = emulator()
    if not _client:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import firestore

        # The client reads the variable once, when it is built: scoped to that moment so no
        # other test (or client) in the session is pointed at the emulator by accident.
        with mock.patch.dict(os.environ, {"FIRESTORE_EMULATOR_HOST": running.host}):
            client = firestore.Client(project=PROJECT, credentials=AnonymousCredentials())
        _client.append(client)
    return _client[0]


@contextmanager
def firestore_store() -> Iterator[Store]:
    from corral.adapters.gcp.firestore_store import FirestoreStore

    client = firestore_client()
    emulator().reset()
    yield FirestoreStore(client, prefix="contract-")
