"""Log batches stay under the API's body limit and CloudWatch's PutLogEvents limits, and the
CloudWatch copy lands in the configured group under the configured stream prefix."""

from __future__ import annotations

from typing import Any

import pytest

from agent_runtime.logs import (
    CLOUDWATCH_MAX_BYTES,
    MAX_BATCH_BYTES,
    MAX_LINE,
    CloudWatchLogs,
    LogShipper,
)
from corral.api.http_events import MAX_BODY_BYTES
from corral.protocol.agent import LogBatch, LogLineIn
from tests.agent.conftest import FakeClock


class FakeLogsClient:
    class exceptions:
        class ResourceAlreadyExistsException(Exception):
            pass

    def __init__(self) -> None:
        self.streams: list[tuple[str, str]] = []
        self.puts: list[dict[str, Any]] = []

    def create_log_stream(self, logGroupName: str, logStreamName: str) -> None:
        self.streams.append((logGroupName, logStreamName))

    def put_log_events(self, **kw: Any) -> None:
        # The service's own rule: UTF-8 bytes of each message plus 26, at most 1,048,576.
        size = sum(len(e["message"].encode()) + 26 for e in kw["logEvents"])
        if size > 1_048_576 or len(kw["logEvents"]) > 10_000:
            raise RuntimeError(f"InvalidParameterException: batch of {size} bytes")
        self.puts.append(kw)


def _shipper(**kw: Any) -> LogShipper:
    shipper = LogShipper(FakeClock(), **kw)
    shipper.start_run("t")
    return shipper


def test_a_batch_of_long_lines_stays_under_the_api_body_limit() -> None:
    """500 lines of 16 KiB are 8 MiB: sent as one batch the API answers 413 and the lines
    are dropped as permanently refused. The shipper cuts them by size instead."""
    shipper = _shipper(batch_lines=500)
    for _ in range(500):
        shipper.add("t", "stdout", "é" * MAX_LINE)  # 2 UTF-8 bytes a character
    sent: list[LogBatch] = []
    assert shipper.flush(lambda _t, batch: sent.append(batch))
    sizes = [len(b.model_dump_json().encode()) for b in sent]
    assert len(sent) > 1 and max(sizes) <= MAX_BATCH_BYTES < MAX_BODY_BYTES
    assert sum(len(b.lines) for b in sent) == 500
    seqs = [x.seq for b in sent for x in b.lines]
    assert seqs == sorted(seqs) and len(set(seqs)) == 500  # in order, none lost or repeated
    assert shipper.backlog() == 0


def test_short_lines_still_go_by_the_line_count() -> None:
    shipper = _shipper(batch_lines=3)
    for i in range(7):
        shipper.add("t", "stdout", f"line {i}")
    sent: list[LogBatch] = []
    shipper.flush(lambda _t, batch: sent.append(batch))
    assert [len(b.lines) for b in sent] == [3, 3, 1]


def test_a_line_larger_than_the_byte_cap_still_goes_alone() -> None:
    shipper = _shipper(batch_bytes=100)
    shipper.add("t", "stdout", "x" * 500)
    shipper.add("t", "stdout", "y")
    sent: list[LogBatch] = []
    shipper.flush(lambda _t, batch: sent.append(batch))
    assert [len(b.lines) for b in sent] == [1, 1]  # no batch is empty, nothing is stuck


def _lines(n: int, text: str) -> list[LogLineIn]:
    return [LogLineIn(seq=i, at=1_700_000_000.0 + i, line=text) for i in range(n)]


@pytest.mark.parametrize(
    ("prefix", "stream"),
    [(None, "i-0abc/t-1"), ("determined-agents", "determined-agents/i-0abc/t-1")],
)
def test_the_cloudwatch_copy_goes_to_the_group_under_the_stream_prefix(
    prefix: str | None, stream: str
) -> None:
    client = FakeLogsClient()
    sink = CloudWatchLogs("/corral/agents", "i-0abc", "us-east-1", client, stream_prefix=prefix)
    sink.put("t-1", _lines(2, "hello"))
    sink.put("t-1", _lines(1, ""))
    assert client.streams == [("/corral/agents", stream)]  # created once
    assert {(p["logGroupName"], p["logStreamName"]) for p in client.puts} == {
        ("/corral/agents", stream)
    }
    assert client.puts[1]["logEvents"][0]["message"] == " "  # CloudWatch refuses empty ones


def test_the_cloudwatch_copy_is_cut_at_put_log_events_limits() -> None:
    client = FakeLogsClient()
    sink = CloudWatchLogs("/g", "i-1", None, client)
    big = _lines(300, "€" * MAX_LINE)  # 48 KiB each: ~14.4 MiB in all
    sink.put("t", big)
    assert len(client.puts) > 1  # the fake refuses any call over the limit
    events = [e for p in client.puts for e in p["logEvents"]]
    assert [e["timestamp"] for e in events] == [int(x.at * 1000) for x in big]
    for put in client.puts:
        assert sum(len(e["message"].encode()) + 26 for e in put["logEvents"]) <= (
            CLOUDWATCH_MAX_BYTES
        )
    many = _lines(25_000, "k")
    client.puts.clear()
    sink.put("t", many)
    assert [len(p["logEvents"]) for p in client.puts] == [10_000, 10_000, 5_000]


def test_the_agent_names_its_streams_from_its_config(make_agent: Any) -> None:
    """cloudwatch_log_stream (the pool's log_stream, written by the bootstrap) reaches the
    CloudWatch copy as the stream prefix once the agent has registered."""
    h = make_agent(
        cloudwatch_log_group="/corral/agents",
        cloudwatch_log_stream="determined-agents",
        aws_region="us-east-1",  # a boto3 client is made, never called
    )
    h.step_until(lambda: h.agent.agent_id is not None)
    sink = h.agent.logs.sink
    assert isinstance(sink, CloudWatchLogs)
    assert sink.stream_name("t-1") == "determined-agents/i-dev/t-1"
