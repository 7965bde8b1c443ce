"""The Lambda entry point: Powertools logging and metrics around the same resolver."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from corral.handlers.aws import api as api_handler
from tests.services.harness import Cluster, make_pool

from .events import http_event


@dataclass
class FakeLambdaContext:
    function_name: str = "corral-api"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:corral-api"
    aws_request_id: str = "req-1"


@pytest.fixture
def handler_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    cluster = Cluster(make_pool())
    monkeypatch.setenv("CORRAL_API_AUTH", "token")
    monkeypatch.setenv("CORRAL_USER_TOKEN", "user-token")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Corral")
    # The Context comes from the injected provider, never from composition (no AWS here).
    monkeypatch.setattr(api_handler, "_ctx", lambda: cluster.ctx)
    api_handler.resolver.cache_clear()  # built again with this test's environment
    yield cluster
    api_handler.resolver.cache_clear()


def test_handler_serves_requests_and_emits_metrics(
    handler_env: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    event = http_event(
        "POST", "/experiments", body={"config": {"entrypoint": "x"}}, bearer="user-token"
    )
    reply = api_handler.handler(event, FakeLambdaContext())  # type: ignore[arg-type]
    assert reply["statusCode"] == 201, reply["body"]
    assert json.loads(reply["body"])["owner"] == "local"

    denied = api_handler.handler(http_event("GET", "/pools"), FakeLambdaContext())  # type: ignore[arg-type]
    assert denied["statusCode"] == 401
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "_aws" in line]
    emitted = [
        m["Name"] for b in blobs for d in b["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]
    ]
    namespaces = {d["Namespace"] for b in blobs for d in b["_aws"]["CloudWatchMetrics"]}
    assert namespaces == {"Corral"}
    assert emitted.count("ApiRequests") == 2
    assert [b["ApiClientErrors"] for b in blobs if "ApiRequests" in b] == [[0.0], [1.0]]


def test_a_crash_is_logged_with_the_correlation_id_and_answered_500(
    handler_env: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken():  # type: ignore[no-untyped-def]
        raise RuntimeError("store unreachable")

    monkeypatch.setattr(api_handler, "_ctx", broken)
    api_handler.resolver.cache_clear()
    # The "corral" loggers got Powertools' JSON handler at import; read what it writes.
    buffer = io.StringIO()
    # (pytest adds capture handlers of its own next to it)
    (json_handler,) = [
        h for h in logging.getLogger("corral").handlers if type(h) is logging.StreamHandler
    ]
    old = json_handler.setStream(buffer)
    try:
        event = http_event("GET", "/pools", bearer="user-token")
        reply = api_handler.handler(event, FakeLambdaContext())  # type: ignore[arg-type]
    finally:
        json_handler.setStream(old)
    assert reply["statusCode"] == 500
    assert "store unreachable" not in reply["body"]
    logs = [json.loads(x) for x in buffer.getvalue().splitlines() if x.strip()]
    (crash,) = [x for x in logs if x.get("message", "").startswith("unhandled error")]
    assert crash["correlation_id"] == event["requestContext"]["requestId"]
    assert "store unreachable" in crash["exception"]


def test_the_swagger_ui_is_served_by_its_own_resolver_and_only_loads_for_docs() -> None:
    """Powertools' ``enable_swagger`` imports its OpenAPI models (0.08 to 0.14 s): a
    container whose first request is not ``/docs`` must not pay for them, and ``/docs``
    must still answer. A fresh interpreter: this process has imported everything."""
    code = (
        "import json, sys\n"
        "from corral.handlers.aws import api\n"
        "class Context:\n"
        "    function_name = 'corral-api'\n"
        "    memory_limit_in_mb = 512\n"
        "    invoked_function_arn = 'arn:aws:lambda:us-east-1:123456789012:function:x'\n"
        "    aws_request_id = 'req-1'\n"
        "models = 'aws_lambda_powertools.event_handler.openapi.models'\n"
        "events = json.loads(sys.argv[1])\n"
        "health = api.handler(events[0], Context())\n"
        "before = models in sys.modules\n"
        "docs = api.handler(events[1], Context())\n"
        "again = api.handler(events[0], Context())\n"
        "print(json.dumps([health['statusCode'], before, docs['statusCode'],\n"
        "    docs['headers'].get('Content-Type'), 'swagger' in docs['body'].lower(),\n"
        "    again['statusCode']]))\n"
    )
    events = [http_event("GET", "/healthz"), http_event("GET", "/docs")]
    env = {
        **os.environ,
        "CORRAL_API_AUTH": "token",
        "CORRAL_USER_TOKEN": "user-token",
        "POWERTOOLS_METRICS_NAMESPACE": "Corral",
    }
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(events)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )

    health, loaded_before_docs, docs, content_type, is_swagger, again = json.loads(
        out.stdout.splitlines()[-1]
    )
    assert (health, loaded_before_docs) == (200, False)
    assert (docs, content_type, is_swagger) == (200, "text/html", True)
    assert again == 200
