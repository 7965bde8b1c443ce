"""``partial_batch_response`` answers exactly as Powertools' batch utility it replaces."""

from __future__ import annotations

from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.exceptions import UnexpectedBatchTypeError

from corral.handlers.aws.sqs_batch import partial_batch_response


def _record(message_id: str, body: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": "r",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
        "awsRegion": "us-east-1",
    }


def _handler(seen: list[tuple[str, str]]) -> Any:
    def handle(record: Any) -> str:
        seen.append((record.message_id, record.body))
        if record.body == "fail":
            raise ValueError("no")
        if record.body == "key":
            raise KeyError("missing")
        return "ok"

    return handle


@pytest.mark.parametrize(
    "bodies",
    [
        ["ok"],
        ["fail"],
        ["ok", "fail", "ok", "key"],
        ["fail", "key", "fail"],  # every record failed: reported, not raised
    ],
)
def test_same_response_and_calls_as_powertools(bodies: list[str]) -> None:
    event = {"Records": [_record(f"m-{i}", body) for i, body in enumerate(bodies)]}
    ours: list[tuple[str, str]] = []
    theirs: list[tuple[str, str]] = []
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

    expected = process_partial_response(
        event=event, record_handler=_handler(theirs), processor=processor
    )

    assert partial_batch_response(event, _handler(ours)) == expected
    assert ours == theirs  # every record, in order


@pytest.mark.parametrize("event", [{}, {"Records": []}, {"Records": "x"}])
def test_an_event_without_records_is_an_error_as_in_powertools(event: dict[str, Any]) -> None:
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    with pytest.raises(UnexpectedBatchTypeError):
        process_partial_response(event=event, record_handler=_handler([]), processor=processor)
    with pytest.raises(ValueError, match="no Records"):
        partial_batch_response(event, _handler([]))


def test_failures_name_the_failed_records() -> None:
    event = {"Records": [_record("a", "ok"), _record("b", "fail")]}

    assert partial_batch_response(event, _handler([])) == {
        "batchItemFailures": [{"itemIdentifier": "b"}]
    }


def test_an_exception_that_is_not_an_error_propagates() -> None:
    # Like Powertools: only ``Exception`` fails a record; a KeyboardInterrupt stops the batch.
    def stop(record: Any) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        partial_batch_response({"Records": [_record("a", "x")]}, stop)


def test_a_record_without_a_body_fails_only_itself_as_in_powertools() -> None:
    broken = _record("m-1", "x")
    del broken["body"]
    event = {"Records": [_record("m-0", "ok"), broken, _record("m-2", "ok")]}
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

    expected = process_partial_response(
        event=event, record_handler=_handler([]), processor=processor
    )

    assert partial_batch_response(event, _handler([])) == expected
    assert expected == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
