"""What AWS hands the functions: Lambda's context object, EventBridge timer events, the EC2
events EventBridge routes to the interruptions queue, and API Gateway HTTP API calls."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from corral.adapters.memory import FakeClock
from corral.api.http_events import http_event, http_reply
from corral.handlers.aws import api
from tests import lambda_events
from tests.chaos.ports import Crashes, SimulatedCrash
from tests.lambda_events import LambdaContext, function_arn


@dataclass
class FakeLambdaContext(LambdaContext):
    function_name: str = "corral-chaos"
    invoked_function_arn: str = function_arn("corral-chaos")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scheduled_event(rule: str, now: float) -> dict[str, Any]:
    return lambda_events.scheduled_event(rule, _iso(now))


def ec2_event(detail_type: str, instance_id: str, now: float, **detail: str) -> dict[str, Any]:
    return lambda_events.ec2_event(detail_type, instance_id, _iso(now), **detail)


class Unreachable(Exception):
    """No HTTP answer at all: the API is down or the packet was lost."""


class Gateway:
    """API Gateway in front of the ``api`` function: HTTP requests in, v2 events to the real
    handler, HTTP replies out. A crash of the function is API Gateway's 502."""

    def __init__(self, clock: FakeClock, crashes: Crashes) -> None:
        self.clock, self.crashes = clock, crashes
        self.down_until = 0.0
        self.calls = 0
        self.refused_down = 0
        self.crashed = 0
        self.server_errors = 0
        self.errors: dict[str, int] = {}  # exceptions that escaped the handler

    def is_down(self) -> bool:
        return self.clock.now() < self.down_until

    def request(
        self, method: str, path: str, body: Any, token: str, source_ip: str = "203.0.113.7"
    ) -> tuple[int, Any]:
        if self.is_down():
            self.refused_down += 1
            raise Unreachable(f"{method} {path}: the API is unreachable")
        raw = (
            b""
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        headers = [("content-type", "application/json"), ("authorization", f"Bearer {token}")]
        event = http_event(method, path, headers, raw, source_ip, api_id="chaos")
        self.calls += 1
        try:
            with self.crashes.invocation("api"):
                result = api.handler(event, FakeLambdaContext("api"))
        except SimulatedCrash:
            self.crashed += 1
            return 502, {"message": "Internal Server Error"}
        except Exception as exc:  # Lambda's unhandled error: API Gateway answers 500
            key = f"{method} {path.split('/')[1]}: {type(exc).__name__}: {exc}"[:200]
            self.errors[key] = self.errors.get(key, 0) + 1
            return 500, {"message": "Internal Server Error"}
        status, _, _, data = http_reply(result)
        if status >= 500:
            self.server_errors += 1
        return status, json.loads(data) if data else None
