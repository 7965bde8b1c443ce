"""SQS event source mappings, emulated: receive batches, hand them to the real handler as
Lambda's SQS event, and delete what succeeded.

As Lambda does: a handler that raises fails the whole batch; with ``ReportBatchItemFailures``
the records named in ``batchItemFailures`` stay on the queue (and so does the whole batch if
the reply is malformed); the rest are deleted. Records left on the queue come back after the
queue's visibility timeout, and SQS moves them to the DLQ after ``maxReceiveCount`` receives:
both are SQS's doing (moto's here), so retries and dead-lettering behave as deployed.

On a queue an EventBridge rule feeds (``QueueSource.eventbridge``), each event is first given
the envelope fields moto leaves out (``eventbridge.complete_message``), so the handler sees
what AWS would have delivered.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from corral.local.eventbridge import account_of, complete_message
from corral.local.lambda_host import FunctionHost
from corral.local.loops import run_until_stopped
from corral.local.resources import QueueSource

log = logging.getLogger(__name__)

WAIT_S = 1  # long-poll time: short, so a stop is seen within a second


def sqs_event(source: QueueSource, messages: list[dict[str, Any]], region: str) -> dict[str, Any]:
    """Lambda's SQS event for a batch of ``ReceiveMessage`` results."""
    records = []
    for m in messages:
        attrs = dict(m.get("Attributes") or {})
        attrs.setdefault("ApproximateReceiveCount", "1")
        records.append(
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m.get("Body", ""),
                "attributes": attrs,
                "messageAttributes": {
                    k: {
                        "stringValue": v.get("StringValue"),
                        "binaryValue": v.get("BinaryValue"),
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": v.get("DataType", "String"),
                    }
                    for k, v in (m.get("MessageAttributes") or {}).items()
                },
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": source.queue_arn,
                "awsRegion": region,
            }
        )
    return {"Records": records}


def failed_ids(result: Any, batch_ids: set[str]) -> set[str]:
    """Message ids to keep on the queue, from a ``ReportBatchItemFailures`` reply. A reply
    Lambda cannot read (an unknown or empty id) fails the whole batch, as Lambda does."""
    if not isinstance(result, dict) or not result.get("batchItemFailures"):
        return set()
    failed = set()
    for item in result["batchItemFailures"]:
        ident = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not ident or ident not in batch_ids:
            return set(batch_ids)
        failed.add(str(ident))
    return failed


class QueuePoller:
    def __init__(
        self,
        source: QueueSource,
        sqs: Any,
        host: FunctionHost,
        region: str,
        stop: threading.Event,
    ) -> None:
        self.source = source
        self._sqs = sqs
        self._host = host
        self._region = region
        self._stop = stop
        self.delivered = 0
        self.failed = 0
        self.thread = threading.Thread(
            target=self._run, name=f"poll-{source.function.logical_id}", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        # poll_once long-polls: no pause between polls, one second after a failure.
        what = f"poller for {self.source.queue_url}"
        run_until_stopped(self._stop, self.poll_once, log, what, retry_s=1.0)

    def poll_once(self) -> int:
        """One receive and delivery; returns how many messages were received."""
        reply = self._sqs.receive_message(
            QueueUrl=self.source.queue_url,
            MaxNumberOfMessages=max(1, min(10, self.source.batch_size)),
            WaitTimeSeconds=WAIT_S,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = reply.get("Messages") or []
        if not messages:
            return 0
        if self.source.eventbridge:
            account = account_of(self.source.queue_arn)
            messages = [complete_message(m, account=account, region=self._region) for m in messages]
        if self.source.raw_events:
            done = [m for m in messages if self._deliver_raw(m)]
        else:
            done = self._deliver_batch(messages)
        for m in done:
            self._sqs.delete_message(
                QueueUrl=self.source.queue_url, ReceiptHandle=m["ReceiptHandle"]
            )
        self.delivered += len(done)
        self.failed += len(messages) - len(done)
        return len(messages)

    def _deliver_batch(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        spec = self.source.function
        try:
            result = self._host.invoke(spec, sqs_event(self.source, messages, self._region))
        except Exception:
            log.exception(
                "%s failed a batch of %d; it will be retried", spec.logical_id, len(messages)
            )
            return []
        keep = (
            failed_ids(result, {m["MessageId"] for m in messages})
            if self.source.report_failures
            else set()
        )
        if keep:
            log.info(
                "%s: %d of %d record(s) failed; left for retry",
                spec.logical_id,
                len(keep),
                len(messages),
            )
        return [m for m in messages if m["MessageId"] not in keep]

    def _deliver_raw(self, message: dict[str, Any]) -> bool:
        """A rule's event for a function target (EventBridge invokes it asynchronously)."""
        try:
            event = json.loads(message.get("Body") or "{}")
            self._host.invoke(self.source.function, event)
        except Exception:
            log.exception(
                "%s failed an EventBridge event; it will be retried",
                self.source.function.logical_id,
            )
            return False
        return True
