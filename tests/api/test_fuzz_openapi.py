"""The API fuzzed from its own OpenAPI document (schemathesis), with a user's token.

Every operation of ``/openapi.json`` gets generated requests, valid ones ("positive") and ones
that break the schema ("negative"), sent through the same HTTP-to-event conversion the local
stack and the GCP function use (``corral.api.http_events``) to the real resolver over the
in-memory adapters. Every response must: not be a 5xx; have a status, content type and body
the document declares for it; when a 4xx, say what is wrong (a message, and for 422 each
field with a reason); and a request that breaks the schema must be refused.

The run is bounded (``CORRAL_FUZZ_EXAMPLES`` examples per operation and mode, 25 by default)
and derandomized, so ``make test`` is repeatable; set ``CORRAL_FUZZ_SEED`` to explore other
inputs (a failure prints the request to reproduce it with curl).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from corral.api.app import build_resolver
from corral.api.auth import TokenAuthenticator
from corral.api.http_events import http_event, http_reply
from corral.api.schemas.public import ErrorBody
from tests.services.harness import Cluster, make_pool

USER_TOKEN = "fuzz-user-token"
HEADERS = {"Authorization": f"Bearer {USER_TOKEN}"}
EXAMPLES = int(os.environ.get("CORRAL_FUZZ_EXAMPLES", "25"))
SEED = os.environ.get("CORRAL_FUZZ_SEED")


class WsgiApi:
    """The resolver as a WSGI app: WSGI request -> ``http_event`` -> resolver -> ``http_reply``
    (what the local stack's loopback server does, minus the socket)."""

    def __init__(self, cluster: Cluster) -> None:
        auth = TokenAuthenticator({USER_TOKEN: "fuzzer"}, agent_secret=b"fuzz-agent-secret")
        self.resolver = build_resolver(lambda: cluster.ctx, auth)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        headers = [
            (key[5:].replace("_", "-").lower(), value)
            for key, value in environ.items()
            if key.startswith("HTTP_")
        ]
        if environ.get("CONTENT_TYPE"):
            headers.append(("content-type", environ["CONTENT_TYPE"]))
        query = environ.get("QUERY_STRING")
        # WSGI hands over the path decoded as latin-1; the event wants it as sent (UTF-8).
        path = environ.get("PATH_INFO", "/").encode("latin-1").decode("utf-8", "replace")
        event = http_event(
            environ["REQUEST_METHOD"],
            path + (f"?{query}" if query else ""),
            headers,
            body,
            "127.0.0.1",
        )
        status, reply_headers, _, payload = http_reply(self.resolver.resolve(event, None))
        start_response(f"{status} -", list(reply_headers.items()))
        return [payload]


def _cluster() -> Cluster:
    """A cluster with one experiment and its instance, so list routes return real records."""
    cluster = Cluster(make_pool(max_instances=2))
    cluster.submit(name="fuzz-seed")
    cluster.pump()
    return cluster


CLUSTER = _cluster()
APP = WsgiApi(CLUSTER)
SCHEMA = schemathesis.openapi.from_wsgi("/openapi.json", APP)
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _names_what_is_wrong(status: int, body: Any) -> None:
    error = ErrorBody.model_validate(body)  # also: no traceback, no framework error shape
    assert error.message.strip(), body
    if status == 422:
        assert error.errors, body
        assert all(e.reason.strip() for e in error.errors), body


def test_every_operation_is_fuzzed() -> None:
    # The document must list what the resolver serves, or the fuzzer silently skips it.
    labels = {op.label for op in OPERATIONS}
    assert {"POST /experiments", "POST /agents/register", "GET /events"} <= labels
    assert len(labels) >= 15


def _negatable(operation: Any) -> bool:
    """Whether a request can break the schema: a body or a query parameter. A bare string
    path parameter accepts any value (negative generation finds nothing to send)."""
    raw = operation.definition.raw
    return "requestBody" in raw or any(p.get("in") == "query" for p in raw.get("parameters", []))


CASES = [(op, GenerationMode.POSITIVE) for op in OPERATIONS] + [
    (op, GenerationMode.NEGATIVE) for op in OPERATIONS if _negatable(op)
]


@pytest.mark.parametrize(
    ("operation", "mode"), CASES, ids=[f"{op.label}-{mode.value}" for op, mode in CASES]
)
def test_fuzz(operation: Any, mode: GenerationMode) -> None:
    checks = [*CHECKS, negative_data_rejection] if mode is GenerationMode.NEGATIVE else CHECKS

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=SEED is None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(operation.as_strategy(generation_mode=mode))
        response = case.call(headers=HEADERS)
        case.validate_response(response, checks=checks, headers=HEADERS)
        if 400 <= response.status_code < 500:
            _names_what_is_wrong(response.status_code, response.json())

    if SEED is not None:
        run = seed(int(SEED))(run)
    run()
