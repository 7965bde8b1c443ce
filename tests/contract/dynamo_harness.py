"""The DynamoDB store under moto, for the contract suite (registered in conftest.py).

Cheap enough for the property test, which builds one store per example: a fresh
``mock_aws`` (a few ms) and the tables of ``dynamo_schema`` (~30 ms), with one boto3 client
kept across stores (creating a client costs ~50 ms; moto intercepts it in every mock).

moto in-process is not thread-safe: it checks a condition, then writes, and rolls a failed
transaction back by restoring whole tables, so two racing threads can both win, or a reader
can see half a transaction. DynamoDB itself is atomic per request, so the harness serialises
moto's DynamoDB requests with one lock: the race test then checks our conditions, not moto's.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest

from corral.ports.store import Store
from tests.moto_env import moto_environ

_client: list[Any] = []  # one client for every store (see the module docstring)
_moto_lock = threading.RLock()


@contextmanager
def moto_env() -> Iterator[None]:
    """Fake credentials, no endpoint override (the local stack's moto server), mock_aws."""
    try:
        from moto import mock_aws
    except ImportError:  # pragma: no cover - the dev extra installs moto
        pytest.skip("moto is not installed")
    with moto_environ(), mock_aws():
        yield


def dynamodb_client() -> Any:
    """The shared client; call inside ``moto_env()``."""
    if not _client:
        from corral.adapters.aws import clients  # as the store makes its own

        _client.append(clients.client("dynamodb", region_name="us-east-1"))
    return _client[0]


@contextmanager
def dynamodb_store() -> Iterator[Store]:
    from corral.adapters.aws.dynamo_schema import table_definitions
    from corral.adapters.aws.dynamo_store import DynamoStore

    with moto_env():  # skips when moto is absent, so import moto only inside
        from moto.dynamodb.responses import DynamoHandler

        unlocked = DynamoHandler.call_action

        @functools.wraps(unlocked)
        def atomic(handler: Any) -> Any:
            with _moto_lock:
                return unlocked(handler)

        with mock.patch.object(DynamoHandler, "call_action", atomic):
            client = dynamodb_client()
            for definition in table_definitions("contract-"):  # a fresh account: no checks
                client.create_table(**definition)
            yield DynamoStore(client, prefix="contract-", sleep=lambda _: None)
