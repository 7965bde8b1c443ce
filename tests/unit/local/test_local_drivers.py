"""How the local stack drives handlers: SQS batches with partial failures, timers, HTTP."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from corral.api.http_events import http_event, http_reply
from corral.local.lambda_host import FunctionHost
from corral.local.pollers import QueuePoller, failed_ids
from corral.local.resources import FunctionSpec, QueueSource, TimerSource
from corral.local.timers import Timer
from tests.moto_env import use_moto_env

SPEC = FunctionSpec("Fn", "pkg.mod.handler", {}, 10)


class Recorder:
    def __init__(self, reply: Any = None, fail: bool = False) -> None:
        self.events: list[Any] = []
        self.reply = reply
        self.fail = fail
        self.contexts: list[Any] = []

    def __call__(self, event: Any, context: Any) -> Any:
        self.events.append(event)
        self.contexts.append(context)
        if self.fail:
            raise RuntimeError("boom")
        return self.reply(event) if callable(self.reply) else self.reply


def host_for(handler: Recorder) -> FunctionHost:
    return FunctionHost("us-east-1", loader=lambda dotted: handler)


@pytest.fixture
def sqs(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    import boto3
    from moto import mock_aws

    use_moto_env(monkeypatch)
    with mock_aws():
        client = boto3.client("sqs", region_name="us-east-1")
        url = client.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
        yield client, url


def poller(client: Any, url: str, handler: Recorder, *, raw: bool = False) -> QueuePoller:
    source = QueueSource(SPEC, url, "arn:aws:sqs:us-east-1:123456789012:q", 10, True, raw)
    return QueuePoller(source, client, host_for(handler), "us-east-1", threading.Event())


def remaining(client: Any, url: str) -> list[str]:
    got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return sorted(m["Body"] for m in got)


def test_partial_batch_failure_keeps_only_the_failed_record(sqs: tuple[Any, str]) -> None:
    client, url = sqs
    for body in ("a", "b", "c"):
        client.send_message(QueueUrl=url, MessageBody=body)

    def fail_b(event: dict[str, Any]) -> dict[str, Any]:
        ids = [r["messageId"] for r in event["Records"] if r["body"] == "b"]
        return {"batchItemFailures": [{"itemIdentifier": i} for i in ids]}

    handler = Recorder(fail_b)
    assert poller(client, url, handler).poll_once() == 3
    record = handler.events[0]["Records"][0]
    assert record["eventSource"] == "aws:sqs" and record["receiptHandle"]
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert record["eventSourceARN"].endswith(":q")
    assert handler.contexts[0].get_remaining_time_in_millis() > 0
    assert remaining(client, url) == ["b"]


def test_a_raising_handler_or_a_bad_reply_fails_the_whole_batch(sqs: tuple[Any, str]) -> None:
    client, url = sqs
    client.send_message(QueueUrl=url, MessageBody="a")
    poller(client, url, Recorder(fail=True)).poll_once()
    assert remaining(client, url) == ["a"]
    assert failed_ids({"batchItemFailures": [{"itemIdentifier": "x"}]}, {"a", "b"}) == {"a", "b"}
    assert failed_ids({"batchItemFailures": []}, {"a"}) == set()


def test_rule_shadow_queue_delivers_the_event_itself(sqs: tuple[Any, str]) -> None:
    client, url = sqs
    client.send_message(QueueUrl=url, MessageBody=json.dumps({"detail-type": "X"}))
    handler = Recorder()
    poller(client, url, handler, raw=True).poll_once()
    assert handler.events == [{"detail-type": "X"}] and remaining(client, url) == []


def test_timer_sends_a_scheduled_event() -> None:
    handler = Recorder()
    source = TimerSource(SPEC, "rule", 60, "arn:aws:events:us-east-1:1:rule/rule")
    timer = Timer(source, host_for(handler), "us-east-1", "1", threading.Event(), scale=0.25)
    assert timer.period_s == 15
    timer.fire()
    event = handler.events[0]
    assert event["detail-type"] == "Scheduled Event" and event["source"] == "aws.events"
    assert event["resources"] == [source.rule_arn]


def test_http_api_v2_event_and_reply() -> None:
    event = http_event(
        "POST",
        "/experiments/e1/kill?x=1&x=2&y=",
        [
            ("Content-Type", "application/json"),
            ("Authorization", "Bearer t"),
            ("Cookie", "a=1; b=2"),
        ],
        b'{"k": 1}',
        "127.0.0.1",
        route_key="ANY /{proxy+}",
    )
    assert event["version"] == "2.0" and event["routeKey"] == "ANY /{proxy+}"
    assert event["rawPath"] == "/experiments/e1/kill" and event["rawQueryString"] == "x=1&x=2&y="
    assert event["queryStringParameters"] == {"x": "1,2", "y": ""}
    assert event["headers"]["authorization"] == "Bearer t" and event["cookies"] == ["a=1", "b=2"]
    assert event["pathParameters"] == {"proxy": "experiments/e1/kill"}
    assert event["requestContext"]["http"]["method"] == "POST"
    assert event["body"] == '{"k": 1}' and not event["isBase64Encoded"]
    binary = http_event("PUT", "/x", [("Content-Type", "application/octet-stream")], b"\xff", "::1")
    assert binary["isBase64Encoded"] and base64.b64decode(binary["body"]) == b"\xff"

    assert http_reply({"a": 1}) == (200, {"content-type": "application/json"}, [], b'{"a": 1}')
    status, headers, cookies, body = http_reply(
        {
            "statusCode": 201,
            "headers": {"X-A": "1"},
            "cookies": ["c=1"],
            "body": base64.b64encode(b"hi").decode(),
            "isBase64Encoded": True,
        }
    )
    assert (status, headers, cookies, body) == (201, {"x-a": "1"}, ["c=1"], b"hi")


def test_events_from_a_rule_get_what_moto_leaves_out_and_keep_it_on_retry(
    sqs: tuple[Any, str],
) -> None:
    client, url = sqs
    from_moto = {  # what moto's EventBridge puts on an SQS target: no "account"
        "id": "b5ef0a07-8dfe-4260-b88c-a4c6bae20f52",
        "time": "2026-01-02T03:04:05Z",
        "version": "0",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "region": "us-east-1",
        "resources": [],
        "detail": {"instance-id": "i-0123456789abcdef0", "instance-action": "terminate"},
    }
    bare = {"detail-type": "EC2 Instance Rebalance Recommendation", "source": "aws.ec2"}
    others = ["not json", json.dumps({"kind": "schedule"})]
    for body in [json.dumps(from_moto), json.dumps(bare), *others]:
        client.send_message(QueueUrl=url, MessageBody=body)
    batches: list[list[dict[str, Any]]] = []

    def fail_everything_once(event: dict[str, Any]) -> dict[str, Any]:
        batches.append(event["Records"])
        ids = [r["messageId"] for r in event["Records"]] if len(batches) == 1 else []
        return {"batchItemFailures": [{"itemIdentifier": i} for i in ids]}

    arn = "arn:aws:sqs:us-east-1:210987654321:q"
    source = QueueSource(SPEC, url, arn, 10, True, eventbridge=True)
    host = host_for(Recorder(fail_everything_once))
    p = QueuePoller(source, client, host, "us-east-1", threading.Event())
    assert p.poll_once() == 4 and p.poll_once() == 4

    first, again = ({r["messageId"]: r["body"] for r in batch} for batch in batches)
    assert first == again  # a retried message is the same event: same id, same time
    bodies = sorted(first.values())
    events = [json.loads(b) for b in bodies if b.startswith('{"version"')]
    completed_moto, completed_bare = sorted(events, key=lambda e: e["id"] != from_moto["id"])
    assert completed_moto == {**from_moto, "account": "210987654321"}  # nothing else changed
    assert list(completed_moto)[:5] == ["version", "id", "detail-type", "source", "account"]
    assert set(completed_bare) - set(bare) == {
        "version",
        "id",
        "account",
        "time",
        "region",
        "resources",
    }
    assert completed_bare["account"] == "210987654321" and completed_bare["region"] == "us-east-1"
    assert set(others) <= set(bodies)  # not EventBridge events: passed on as they came
    for record in batches[0]:
        assert record["md5OfBody"] == hashlib.md5(record["body"].encode()).hexdigest()
