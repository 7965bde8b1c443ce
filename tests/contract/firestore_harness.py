"""Google's Firestore emulator for the contract suite (registered in conftest.py).

One emulator per test session, started in the background as soon as the session has
firestore cases to run (``prestart``), waited for on first use (``gcloud emulators firestore start``
on a free loopback port, ready in 1-2 s) and stopped at exit. Each store starts empty: the
emulator's ``DELETE .../documents`` endpoint wipes the project (a few ms), so the property
test can build one store per example. One client is shared by every store.

Starting and stopping (by the Java process's own PID) are google_emulator.py's.

Skips (with the reason) when ``gcloud``, Java or the emulator component is missing.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from corral.ports.store import Store
from tests.contract.google_emulator import EmulatorSession, GoogleEmulator, missing_prerequisite

PROJECT = "corral-contract"


class Emulator(GoogleEmulator):
    def __init__(self) -> None:
        super().__init__("Firestore", ["emulators", "firestore", "start"])

    def reset(self) -> None:
        url = f"http://{self.host}/emulator/v1/projects/{PROJECT}/databases/(default)/documents"
        request = urllib.request.Request(url, method="DELETE")
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()


_client: list[Any] = []


def _missing_prerequisite() -> str | None:
    return missing_prerequisite("Firestore", "google.cloud.firestore", "google-cloud-firestore")


_session = EmulatorSession("Firestore", Emulator, _missing_prerequisite, on_stop=_client.clear)
prestart = _session.prestart
emulator = _session.emulator
stop_emulator = _session.stop


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
