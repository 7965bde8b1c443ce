"""SqsQueue: the Queue port on SQS, and the parser the queue handlers use on a record's body.

- ``send`` packs messages into ``SendMessageBatch`` calls (10 entries, 256 KiB at most) and
  resends the entries SQS reports as failed on its side; an entry failed by the sender's
  fault (too big, bad attribute) raises at once, since resending cannot help.
- FIFO queues (URL ending in ``.fifo``) get a ``MessageDeduplicationId`` from ``dedupe_id``
  (SQS drops a repeat within 5 minutes) or a random one when there is none (no dedupe), and a
  ``MessageGroupId``: per instance record for commands about one instance (ordered per
  instance, parallel across instances), per kind otherwise (e.g. one schedule pass at a time).
  FIFO queues cannot delay one message: a ``delay_s`` sent to one raises ``ValueError``.
- Standard queues ignore ``dedupe_id`` (consumers are idempotent) and get ``DelaySeconds``
  from ``delay_s``, rounded up and capped at SQS's 900 s: consumers re-check their deadlines.
- The body is JSON ``{"kind": ..., "body": ...}``; ``parse_sqs_body`` reverses it. A body
  over SQS's 256 KiB raises ``ValueError`` before anything is sent, like every other
  refusal found while building the entries: a batch is sent whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from corral.ports.queue import Message, QueueName

MAX_BATCH = 10  # SendMessageBatch entries
MAX_BATCH_BYTES = 256 * 1024  # total payload of one batch
MAX_MESSAGE_BYTES = 256 * 1024  # one message body
MAX_DELAY_S = 900  # SQS DelaySeconds maximum
_RETRIES = 5
_ID_OK = re.compile(r"^[\x21-\x7e]{1,128}$")  # allowed dedupe / group id characters


class SendError(Exception):
    """Some messages could not be sent; ``failed`` holds SQS's reports for them."""

    def __init__(self, queue: str, failed: list[dict[str, Any]]) -> None:
        codes = ", ".join(sorted({str(f.get("Code")) for f in failed}))
        super().__init__(f"{len(failed)} message(s) not sent to {queue}: {codes}")
        self.failed = failed


def encode_body(message: Message) -> str:
    return json.dumps({"kind": message.kind, "body": message.body}, separators=(",", ":"))


def parse_sqs_body(body: str) -> Message:
    """The Message an SQS record's body carries (as ``SqsQueue.send`` wrote it)."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as error:
        raise ValueError(f"SQS body is not JSON: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise ValueError("SQS body must be an object with a string 'kind'")
    payload = data.get("body", {})
    if not isinstance(payload, dict):
        raise ValueError("SQS body's 'body' must be an object")
    return Message(kind=data["kind"], body=payload)


def _safe_id(value: str) -> str:
    """SQS ids allow 1-128 printable ASCII characters; anything else is hashed."""
    return value if _ID_OK.match(value) else hashlib.sha256(value.encode()).hexdigest()


def group_id(message: Message) -> str:
    instance_id = message.body.get("instance_id")
    if isinstance(instance_id, str) and instance_id:
        return _safe_id(f"{message.kind}:{instance_id}")
    return _safe_id(message.kind)


class SqsQueue:
    """Implements ``corral.ports.queue.Queue``.

    ``urls`` maps each queue name to its URL; ``client`` is a boto3 SQS client (created on
    first use when omitted); ``sleep`` is the backoff between resends (tests pass a fake).
    """

    def __init__(
        self,
        urls: Mapping[QueueName, str],
        client: Any | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._urls = dict(urls)
        self._client = client
        self._sleep = sleep

    @property
    def client(self) -> Any:
        if self._client is None:
            from corral.adapters.aws import clients  # lazily: keeps cold starts fast

            self._client = clients.client("sqs")
        return self._client

    def send(self, queue: QueueName, messages: Sequence[Message]) -> None:
        try:
            url = self._urls[queue]
        except KeyError:
            raise ValueError(f"no queue URL configured for {queue.value!r}") from None
        fifo = url.endswith(".fifo")
        entries = [self._entry(str(n), m, fifo) for n, m in enumerate(messages)]
        for batch in _batches(entries):
            self._send_batch(url, batch)

    def _entry(self, entry_id: str, message: Message, fifo: bool) -> dict[str, Any]:
        body = encode_body(message)
        if len(body.encode()) > MAX_MESSAGE_BYTES:
            raise ValueError(
                f"{message.kind}: {len(body.encode())} bytes is over SQS's "
                f"{MAX_MESSAGE_BYTES}-byte message limit"
            )
        entry: dict[str, Any] = {"Id": entry_id, "MessageBody": body}
        if fifo:
            if message.delay_s > 0:
                raise ValueError(
                    f"{message.kind}: a FIFO queue cannot delay one message; "
                    "send delayed commands to a standard queue"
                )
            dedupe = message.dedupe_id if message.dedupe_id is not None else uuid.uuid4().hex
            entry["MessageDeduplicationId"] = _safe_id(dedupe)
            entry["MessageGroupId"] = group_id(message)
        elif message.delay_s > 0:
            entry["DelaySeconds"] = min(MAX_DELAY_S, math.ceil(message.delay_s))
        return entry

    def _send_batch(self, url: str, batch: list[dict[str, Any]]) -> None:
        for attempt in range(_RETRIES + 1):
            reply = self.client.send_message_batch(QueueUrl=url, Entries=batch)
            failed = reply.get("Failed") or []
            if not failed:
                return
            if any(f.get("SenderFault") for f in failed) or attempt == _RETRIES:
                raise SendError(url, failed)
            retry = {f["Id"] for f in failed}
            batch = [e for e in batch if e["Id"] in retry]
            self._sleep(0.05 * 2**attempt)


def _batches(entries: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Runs of at most 10 entries and 256 KiB of bodies (a bigger single message is sent
    alone, and SQS says why it refuses it)."""
    batch: list[dict[str, Any]] = []
    size = 0
    for entry in entries:
        entry_size = len(entry["MessageBody"].encode())
        if batch and (len(batch) == MAX_BATCH or size + entry_size > MAX_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(entry)
        size += entry_size
    if batch:
        yield batch
