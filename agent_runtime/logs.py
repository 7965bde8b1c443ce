"""Trial log shipping: lines are numbered as they arrive, sent in batches, and kept until the
control plane accepted them, so an outage delays logs instead of losing them (up to a cap).

Sequence numbers are unique and increasing per trial across runs and agents: each run starts
at its wall-clock start in microseconds, so a resent batch is recognisable as a duplicate and
a later run never reuses an earlier run's numbers.

Batches are capped by size as well as by line count: 500 lines of 16 KiB are 8 MiB of JSON,
over the API's 6 MiB body limit, and its 413 would drop the batch as a permanent refusal.
The CloudWatch copy splits what it is given again at PutLogEvents' own limits.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

from agent_runtime.clock import Clock
from corral.protocol.agent import LogBatch, LogLineIn

log = logging.getLogger(__name__)

MAX_LINE = 16_384  # the schema's limit
MAX_PENDING = 100_000  # per trial; beyond this the oldest unsent lines are dropped
# JSON bytes of one batch to the control plane: well under its 6 MiB body limit
# (corral.api.http_events.MAX_BODY_BYTES), and a line is at most ~100 KB of JSON (16 KiB
# characters, each escaped to at most 6 bytes), so a batch always holds at least one line.
MAX_BATCH_BYTES = 1024 * 1024
_BATCH_ENVELOPE = len('{"lines":[]}')
# PutLogEvents: at most 1,048,576 bytes per call, counted as each message's UTF-8 bytes plus
# 26, and at most 10,000 events.
CLOUDWATCH_MAX_BYTES = 1_048_576
CLOUDWATCH_EVENT_OVERHEAD = 26
CLOUDWATCH_MAX_EVENTS = 10_000


class LogSender(Protocol):
    def __call__(self, trial_id: str, batch: LogBatch) -> None:
        """Send or raise."""


class LogShipper:
    def __init__(
        self,
        clock: Clock,
        batch_lines: int = 500,
        sink: CloudWatchLogs | None = None,
        batch_bytes: int = MAX_BATCH_BYTES,
    ):
        self._clock = clock
        self._lock = threading.Lock()  # reader threads append, the main loop flushes
        self._pending: dict[str, deque[LogLineIn]] = {}
        self._next_seq: dict[str, int] = {}
        self._last_seq: dict[str, int] = {}  # the last number given to a line, per trial
        self._dropped: dict[str, int] = {}
        self.batch_lines = max(1, min(batch_lines, 5_000))
        self.batch_bytes = batch_bytes
        self.sink = sink

    def start_run(self, trial_id: str) -> None:
        with self._lock:
            base = int(self._clock.time() * 1_000_000)
            self._next_seq[trial_id] = max(base, self._next_seq.get(trial_id, 0))

    def add(self, trial_id: str, stream: str, line: str) -> None:
        with self._lock:
            seq = self._next_seq.get(trial_id, 0)
            self._next_seq[trial_id] = seq + 1
            self._last_seq[trial_id] = seq
            queue = self._pending.setdefault(trial_id, deque())
            if len(queue) >= MAX_PENDING:
                queue.popleft()
                self._dropped[trial_id] = self._dropped.get(trial_id, 0) + 1
            queue.append(
                LogLineIn(seq=seq, at=self._clock.time(), line=line[:MAX_LINE], stream=stream)
            )

    def backlog(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._pending.values())

    def last_seq(self, trial_id: str) -> int:
        """The number of the trial's last line read here so far, -1 if none: where its log
        stream ends once the trial has ended (reported with its terminal status)."""
        with self._lock:
            return self._last_seq.get(trial_id, -1)

    def flush(self, send: LogSender) -> bool:
        """Send everything pending, batch by batch. Returns False if a send failed (the
        lines stay queued and go again next time, with the same sequence numbers)."""
        with self._lock:
            trial_ids = list(self._pending)
        # all() stops at the first failure: in an outage, one failed send per flush is enough.
        return all(self.flush_trial(trial_id, send) for trial_id in trial_ids)

    def flush_trial(self, trial_id: str, send: LogSender) -> bool:
        """Send one trial's pending lines (before its terminal status, so a reader that stops
        at the end of the trial has them all). False if a send failed."""
        while True:
            with self._lock:
                queue = self._pending.get(trial_id)
                if not queue:
                    self._pending.pop(trial_id, None)
                    return True
                lines = self._next_batch(queue)
            try:
                send(trial_id, LogBatch(lines=lines))
            except PermanentLogError as exc:
                log.warning("dropping %d log lines of %s: %s", len(lines), trial_id, exc)
            except Exception as exc:
                log.debug("log flush failed for %s: %s", trial_id, exc)
                return False
            with self._lock:
                # By sequence number, not count: the cap may have dropped lines meanwhile.
                while queue and queue[0].seq <= lines[-1].seq:
                    queue.popleft()
            if self.sink is not None:
                self.sink.put(trial_id, lines)

    def _next_batch(self, queue: deque[LogLineIn]) -> list[LogLineIn]:
        """The oldest lines, at most ``batch_lines`` of them and ``batch_bytes`` of JSON (the
        first line always goes, whatever its size: a line alone fits the API's limit)."""
        batch: list[LogLineIn] = []
        size = _BATCH_ENVELOPE
        for line in itertools.islice(queue, self.batch_lines):
            n = len(line.model_dump_json().encode()) + 1  # the comma
            if batch and size + n > self.batch_bytes:
                break
            batch.append(line)
            size += n
        return batch


class PermanentLogError(Exception):
    """The control plane refused the batch for good (4xx): resending cannot help."""


class CloudWatchLogs:
    """Optional copy of trial logs in CloudWatch Logs (``cloudwatch_log_group``), one stream
    per agent and trial: ``<instance>/<trial>``, or ``<prefix>/<instance>/<trial>`` with
    ``cloudwatch_log_stream`` (Determined's single ``log_stream`` becomes the prefix). Best
    effort: the control plane holds the authoritative copy, so failures are logged, not kept."""

    def __init__(
        self,
        group: str,
        agent_id: str,
        region: str | None,
        client: Any = None,
        stream_prefix: str | None = None,
    ):
        if client is None:
            import boto3  # type: ignore[import-untyped,unused-ignore]

            client = boto3.client("logs", region_name=region)
        self._client = client
        self._group = group
        self._agent_id = agent_id
        self._prefix = (stream_prefix or "").strip("/")
        self._streams: set[str] = set()

    def stream_name(self, trial_id: str) -> str:
        own = f"{self._agent_id}/{trial_id}"
        return f"{self._prefix}/{own}" if self._prefix else own

    def put(self, trial_id: str, lines: list[LogLineIn]) -> None:
        stream = self.stream_name(trial_id)
        events = [{"timestamp": int(x.at * 1000), "message": x.line or " "} for x in lines]
        try:
            if stream not in self._streams:
                exists = self._client.exceptions.ResourceAlreadyExistsException
                with contextlib.suppress(exists):
                    self._client.create_log_stream(logGroupName=self._group, logStreamName=stream)
                self._streams.add(stream)
            for chunk in _put_chunks(events):
                self._client.put_log_events(
                    logGroupName=self._group, logStreamName=stream, logEvents=chunk
                )
        except Exception as exc:
            log.warning("CloudWatch Logs put failed for %s: %s", stream, exc)


def _put_chunks(events: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """``events`` in order, cut where one PutLogEvents call would go over its limits."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for event in events:
        n = len(str(event["message"]).encode()) + CLOUDWATCH_EVENT_OVERHEAD
        if chunk and (size + n > CLOUDWATCH_MAX_BYTES or len(chunk) >= CLOUDWATCH_MAX_EVENTS):
            yield chunk
            chunk, size = [], 0
        chunk.append(event)
        size += n
    if chunk:
        yield chunk
