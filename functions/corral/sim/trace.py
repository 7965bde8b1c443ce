"""Workload traces: the jobs a simulation replays.

Two formats:

- ``canonical``: a CSV with a header and the columns ``submit_s,gpus,duration_s`` and,
  optionally, ``name``, ``priority`` and ``checkpoint_interval_s`` (empty = the simulation's
  default). Times are seconds from the start of the trace.
- ``alibaba-openb``: ``openb_pod_list_*.csv`` from Alibaba's cluster-trace-gpu-v2023, read
  as its README says: submit at ``creation_time``, ``num_gpu`` whole GPUs (a GPU-sharing pod,
  ``gpu_milli`` > 0 with ``num_gpu`` 1, asks for a whole GPU: Corral does not share GPUs),
  run for ``deletion_time - scheduled_time`` seconds.
  Two kinds of row are *skipped* (and counted in ``Trace.skipped``): CPU-only pods
  (``num_gpu`` 0), which a GPU pool never sees, and pods that were never scheduled (empty
  ``scheduled_time``, phase Pending): they never ran, so they have no duration to replay.

Times are bounded: a submit time or a duration above ``MAX_TRACE_S`` (two years) is refused,
since the replay's horizon and its outage draws grow with them (1e300 never ends).

A UTF-8 byte order mark (Excel's "CSV UTF-8") is accepted.

Every problem names the file and line (``trace.csv:12: gpus: must be a whole number >= 0``);
all problems are collected, up to a limit, so one run shows what to fix.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

MAX_PROBLEMS = 20
# The largest submit time and duration a trace row may have, in seconds. The longest public
# GPU traces span months (Alibaba cluster-trace-gpu-v2023's openb: 149 days; Helios: about
# 6 months; Philly: 75 days), and so do their longest jobs; two years is beyond any of them
# (a row at the bound replays in seconds). The replay's horizon, and the capacity outages
# drawn over it, grow with these times: `1e300` ran for minutes without end before this bound.
MAX_TRACE_S = 2 * 365 * 86400.0
_MAX_TEXT = f"{MAX_TRACE_S:.0f} (two years in seconds)"


class TraceFormat(StrEnum):
    CANONICAL = "canonical"
    ALIBABA_OPENB = "alibaba-openb"


@dataclass(frozen=True, slots=True)
class Job:
    submit_s: float
    gpus: int
    duration_s: float
    name: str
    priority: int = 42
    checkpoint_interval_s: float | None = None  # None: the simulation's default


@dataclass(frozen=True)
class Trace:
    jobs: tuple[Job, ...]  # sorted by submit time (stable)
    skipped: Mapping[str, int] = field(default_factory=dict)  # reason -> rows

    @property
    def gpu_seconds(self) -> float:
        return sum(j.gpus * j.duration_s for j in self.jobs)


class TraceError(ValueError):
    """A trace that cannot be replayed; one ``file:line: field: reason`` line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def read_trace(path: Path, fmt: TraceFormat = TraceFormat.CANONICAL) -> Trace:
    reader = _canonical_row if fmt is TraceFormat.CANONICAL else _openb_row
    required = CANONICAL_COLUMNS if fmt is TraceFormat.CANONICAL else OPENB_COLUMNS
    jobs: list[Job] = []
    skipped: Counter[str] = Counter()
    problems: list[str] = []
    for line, row in _rows(path, required):
        try:
            job = reader(row, line)
        except _RowError as exc:
            problems.append(f"{path}:{line}: {exc}")
            if len(problems) >= MAX_PROBLEMS:
                problems.append(f"{path}: stopped after {MAX_PROBLEMS} problems")
                break
            continue
        if isinstance(job, str):
            skipped[job] += 1
        else:
            jobs.append(job)
    if problems:
        raise TraceError(problems)
    if not jobs:
        raise TraceError([f"{path}: no job to replay" + _skip_note(skipped)])
    jobs.sort(key=lambda j: j.submit_s)
    return Trace(tuple(jobs), dict(skipped))


CANONICAL_COLUMNS = ("submit_s", "gpus", "duration_s")
OPENB_COLUMNS = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time")


class _RowError(ValueError):
    pass


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        # utf-8-sig: drop the byte order mark Excel writes, else the first column's name
        # would start with it and read as missing.
        handle = path.open(newline="", encoding="utf-8-sig")
    except FileNotFoundError:
        raise TraceError([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise TraceError([f"{path}: is a directory, not a file"]) from None
    except OSError as exc:
        raise TraceError([f"{path}: cannot be read: {exc.strerror or exc}"]) from None
    with handle:
        try:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceError([f"{path}:1: missing column(s): {', '.join(missing)}"])
            for row in reader:
                if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                    continue  # a blank line
                if None in row:
                    raise TraceError([f"{path}:{reader.line_num}: more fields than the header"])
                yield reader.line_num, {k: (v or "").strip() for k, v in row.items()}
        except UnicodeDecodeError:
            raise TraceError([f"{path}: is not UTF-8 text"]) from None
        except csv.Error as exc:
            raise TraceError([f"{path}: invalid CSV: {exc}"]) from None


def _number(row: dict[str, str], column: str, *, minimum: float = 0.0) -> float:
    text = row.get(column, "")
    try:
        value = float(text)
    except ValueError:
        raise _RowError(f"{column}: must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise _RowError(f"{column}: must be a finite number, got {text!r}")
    if value < minimum:
        raise _RowError(f"{column}: must be >= {minimum:g}, got {text!r}")
    return value


def _whole(row: dict[str, str], column: str) -> int:
    value = _number(row, column)
    if value != int(value):
        raise _RowError(f"{column}: must be a whole number, got {row.get(column)!r}")
    return int(value)


def _seconds(row: dict[str, str], column: str) -> float:
    """A time in seconds, at most MAX_TRACE_S."""
    value = _number(row, column)
    if value > MAX_TRACE_S:
        raise _RowError(f"{column}: must be at most {_MAX_TEXT}, got {row.get(column)!r}")
    return value


def _canonical_row(row: dict[str, str], line: int) -> Job | str:
    gpus = _whole(row, "gpus")
    if gpus == 0:
        raise _RowError("gpus: must be >= 1 (the simulator replays GPU jobs only)")
    duration = _seconds(row, "duration_s")
    if duration <= 0:
        raise _RowError(f"duration_s: must be > 0, got {row.get('duration_s')!r}")
    interval = row.get("checkpoint_interval_s", "")
    priority = row.get("priority", "")
    if priority and not 1 <= _whole(row, "priority") <= 99:
        raise _RowError(f"priority: must be 1 to 99 (lower runs first), got {priority!r}")
    return Job(
        submit_s=_seconds(row, "submit_s"),
        gpus=gpus,
        duration_s=duration,
        name=row.get("name") or f"job-{line - 1}",
        priority=_whole(row, "priority") if priority else 42,
        checkpoint_interval_s=_positive(row, "checkpoint_interval_s") if interval else None,
    )


def _positive(row: dict[str, str], column: str) -> float:
    value = _number(row, column)
    if value <= 0:
        raise _RowError(f"{column}: must be > 0, got {row.get(column)!r}")
    return value


def _openb_row(row: dict[str, str], line: int) -> Job | str:
    gpus = _whole(row, "num_gpu")
    _number(row, "gpu_milli")  # validated; a shared GPU (num_gpu 1) is one whole GPU
    submit = _seconds(row, "creation_time")
    if gpus == 0:
        return "CPU-only pod (num_gpu 0)"
    if not row.get("scheduled_time"):
        return "never scheduled (no scheduled_time)"
    scheduled = _number(row, "scheduled_time")
    end = _number(row, "deletion_time")
    if end <= scheduled:
        raise _RowError(f"deletion_time: must be after scheduled_time ({end:g} <= {scheduled:g})")
    if end - scheduled > MAX_TRACE_S:
        raise _RowError(
            f"deletion_time: the pod ran {end - scheduled:g} s (deletion_time - scheduled_time),"
            f" must be at most {_MAX_TEXT}"
        )
    return Job(submit, gpus, end - scheduled, row.get("name") or f"pod-{line - 1}")


def _skip_note(skipped: Mapping[str, int]) -> str:
    if not skipped:
        return ""
    return " (skipped: " + ", ".join(f"{n} {why}" for why, n in skipped.items()) + ")"


def describe_skipped(trace: Trace) -> str:
    """One line for humans about the rows left out, or ''."""
    return _skip_note(trace.skipped).strip(" ()")
