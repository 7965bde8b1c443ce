"""SQS partial batch responses: each failing record is reported in ``batchItemFailures`` and
only it is redelivered.

The same contract as Powertools' ``BatchProcessor(EventType.SQS,
raise_on_entire_batch_failure=False)`` with ``process_partial_response``: records in order,
each as an ``SQSRecord``; any ``Exception`` fails just its record; nothing is raised when all
fail; an event without records is an error. ``tests/unit/handlers/test_sqs_batch.py`` runs
both side by side. Not that utility itself: importing ``aws_lambda_powertools.utilities.batch``
also imports asyncio and Powertools' pydantic parser models for every event source, about
0.03 s of each cold start of the two functions that read SQS batches, for a loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord


def partial_batch_response(
    event: Mapping[str, Any], record_handler: Callable[[SQSRecord], object]
) -> dict[str, list[dict[str, str]]]:
    """Run ``record_handler`` on every record; the ids of those that raised, for SQS."""
    records = event.get("Records")
    if not records or not isinstance(records, list):
        raise ValueError("not an SQS batch: the event has no Records")
    failures: list[dict[str, str]] = []
    for raw in records:
        record = SQSRecord(raw)
        try:
            record_handler(record)
        except Exception:  # the handler logged why; SQS redelivers just this record
            failures.append({"itemIdentifier": record.message_id})
    return {"batchItemFailures": failures}
