"""Trial metrics: the agent tails each run's metrics file and ships new points with its
heartbeats (format and helper: docs/metrics.md).

Each run of a trial appends JSON lines to its own file, ``<work_dir>/trials/<trial>/metrics/
<base>.jsonl`` (given to the trial as ``CORRAL_METRICS_FILE``), where ``base`` is the run's
start in microseconds. Line ``n`` of the file is point ``seq = base + n``: the same line
always gets the same number, so a file read again (the agent restarted and recovers the
files it left) yields the same points, and the control plane drops the ones it has. Runs
start later than earlier runs started, so numbers keep increasing across runs (a run would
have to write a million lines a second to overtake the next one's base).

The file is the buffer: the agent reads it only as far as it has room for (``MAX_PENDING``
unsent points per file), only up to the last complete line while the run lives (a partial
last line is read once it is complete, or once the run ended), and deletes it once the run
ended and every point was accepted. A malformed line is skipped and counted; the first few
are named in the trial's own log (stderr) so its author sees why a point is missing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from agent_runtime.clock import Clock
from corral.protocol.agent import MetricPointIn, TrialMetrics
from corral.protocol.metrics import (
    KINDS,
    MAX_NAME_LENGTH,
    finite_value,
    is_number,
    metric_kind,
    valid_name,
    whole_batches,
)

log = logging.getLogger(__name__)

METRICS_DIR = "metrics"
MAX_PENDING = 2_000  # unsent points per file; the rest waits in the file
MAX_LINE = 65_536  # bytes; a longer line is malformed
READ_CHUNK = 1 << 20
SHOWN_PROBLEMS = 10  # malformed lines named in the trial's log per run

Problem = Callable[[str, str], None]  # (trial_id, message) -> a line in the trial's log


def metrics_dir(work_dir: Path, trial_id: str) -> Path:
    return work_dir / "trials" / trial_id / METRICS_DIR


class Malformed(ValueError):
    pass


def parse_line(raw: bytes, seq: int, at: float) -> MetricPointIn | None:
    """The point a line holds; None for a blank line; ``Malformed`` saying what is wrong.
    Values that are not finite (NaN, inf) are left out; a point needs one finite value."""
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise Malformed("not UTF-8") from None
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        raise Malformed("not JSON") from None
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    kind = metric_kind(data.get("kind"))
    if kind is None:
        raise Malformed(f"kind must be one of {', '.join(KINDS)}, got {data.get('kind')!r}")
    batches = whole_batches(data.get("batches"))
    if batches is None:
        raise Malformed(f"batches must be a whole number >= 0, got {data.get('batches')!r}")
    values = data.get("values")
    if not isinstance(values, dict) or not values:
        raise Malformed("values must be a non-empty object of numbers")
    kept: dict[str, float] = {}
    for name, value in values.items():
        if not valid_name(name):
            raise Malformed(
                f"bad value name {name[:80]!r} (1 to {MAX_NAME_LENGTH} printable chars)"
            )
        if not is_number(value):
            raise Malformed(f"values.{name} must be a number, got {value!r}")
        number = finite_value(value)
        if number is not None:
            kept[name] = number
    if not kept:
        raise Malformed("no finite value (NaN and inf are left out)")
    return MetricPointIn(seq=seq, kind=kind.value, batches=batches, values=kept, at=at)


@dataclass
class _Tail:
    trial_id: str
    path: Path
    base: int
    live: bool  # started by this agent process (problems go to the trial's log)
    offset: int = 0
    line_no: int = 0
    ended: bool = False  # the run is over: a last line without newline counts too
    eof: bool = False  # ended, and everything in the file has been read
    skipping: bool = False  # inside an overlong line: drop bytes up to its newline
    malformed: int = 0
    pending: deque[MetricPointIn] = field(default_factory=deque)


class MetricsTailer:
    def __init__(self, clock: Clock, on_problem: Problem | None = None) -> None:
        self._clock = clock
        self._on_problem = on_problem
        self._tails: dict[Path, _Tail] = {}
        self._next_base: dict[str, int] = {}

    # ---- runs ---------------------------------------------------------------------------
    def start_run(self, trial_id: str, directory: Path) -> Path:
        """Create this run's file (writable by any user the trial may run as)."""
        base = max(int(self._clock.time() * 1_000_000), self._next_base.get(trial_id, 0))
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{base}.jsonl"
        path.touch()
        os.chmod(path, 0o666)  # the trial may run as another user (run_as_uid)
        self._tails[path] = _Tail(trial_id, path, base, live=True)
        self._next_base[trial_id] = base + 1
        return path

    def end_run(self, trial_id: str) -> None:
        for tail in self._tails.values():
            if tail.trial_id == trial_id:
                tail.ended = True

    def recover(self, trials_dir: Path) -> int:
        """Files an earlier agent process left (it died before they were all accepted):
        shipped again from their start, the control plane drops what it has."""
        found = 0
        for path in sorted(trials_dir.glob(f"*/{METRICS_DIR}/*.jsonl")):
            if path in self._tails or not path.stem.isdigit():
                continue
            trial_id = path.parent.parent.name
            base = int(path.stem)
            self._tails[path] = _Tail(trial_id, path, base, live=False, ended=True)
            self._next_base[trial_id] = max(self._next_base.get(trial_id, 0), base + 1)
            found += 1
        return found

    def unsent(self, trial_id: str) -> bool:
        """Whether points of the trial are pending or still unread in its files."""
        for tail in self._tails.values():
            if tail.trial_id != trial_id:
                continue
            if tail.pending:
                return True
            with contextlib.suppress(OSError):
                if tail.path.stat().st_size > tail.offset:
                    return True
        return False

    def backlog(self) -> int:
        """Runs that ended with points not yet accepted (the agent waits for them to exit)."""
        return sum(1 for t in self._tails.values() if t.ended)

    # ---- shipping -----------------------------------------------------------------------
    def batch(self, limit: int) -> tuple[list[TrialMetrics], list[tuple[_Tail, int]]]:
        """Up to ``limit`` unsent points, oldest run first; and a token for ``acked``."""
        by_trial: dict[str, list[MetricPointIn]] = {}
        taken: list[tuple[_Tail, int]] = []
        room = limit
        for tail in sorted(self._tails.values(), key=lambda t: t.base):
            self._read(tail)
            n = min(room, len(tail.pending))
            if n:
                by_trial.setdefault(tail.trial_id, []).extend(list(tail.pending)[:n])
                taken.append((tail, n))
                room -= n
        self._forget_finished()
        return [TrialMetrics(trial_id=t, points=p) for t, p in by_trial.items()], taken

    def acked(self, taken: list[tuple[_Tail, int]], retry: Collection[str] = ()) -> None:
        """The heartbeat carrying ``taken`` was answered: drop what was stored."""
        for tail, n in taken:
            if tail.trial_id in retry:
                continue
            for _ in range(min(n, len(tail.pending))):
                tail.pending.popleft()
        self._forget_finished()

    def _forget_finished(self) -> None:
        for path, tail in list(self._tails.items()):
            if tail.ended and tail.eof and not tail.pending:
                if tail.malformed:
                    log.warning("%s: %d malformed metrics line(s) skipped", path, tail.malformed)
                with contextlib.suppress(OSError):  # gone, or not ours to delete
                    path.unlink(missing_ok=True)
                del self._tails[path]

    # ---- reading ------------------------------------------------------------------------
    def _read(self, tail: _Tail) -> None:
        while len(tail.pending) < MAX_PENDING and not tail.eof:
            try:
                with tail.path.open("rb") as f:
                    f.seek(tail.offset)
                    data = f.read(READ_CHUNK)
            except FileNotFoundError:  # the trial deleted it: what was read is all
                data = b""
            except OSError as exc:  # unreadable: never let it stop the heartbeat
                log.warning("cannot read %s: %s", tail.path, exc)
                tail.eof = tail.ended  # an ended run gives up on the rest
                return
            before = tail.offset
            self._consume(tail, data, last_chunk=len(data) < READ_CHUNK)
            if tail.offset == before:
                return  # nothing complete to take now

    def _consume(self, tail: _Tail, data: bytes, last_chunk: bool) -> None:
        """Take the complete lines of ``data`` (read at ``tail.offset``) while there is room."""
        at = self._clock.time()
        start = 0
        while len(tail.pending) < MAX_PENDING:
            end = data.find(b"\n", start)
            if end < 0:
                rest = data[start:]
                if tail.skipping or len(rest) > MAX_LINE:
                    tail.skipping = True  # an overlong line: drop it as it comes
                    tail.offset += len(rest)
                    if tail.ended and last_chunk:  # the run's last line: it ends here
                        tail.skipping = False
                        self._problem(tail, f"longer than {MAX_LINE} bytes")
                        tail.line_no += 1
                        tail.eof = True
                elif tail.ended and last_chunk:
                    if rest:  # the last line of a finished run, written without newline
                        tail.offset += len(rest)
                        self._take(tail, rest, at)
                    tail.eof = True
                return
            raw = data[start:end]
            tail.offset += end - start + 1
            start = end + 1
            if tail.skipping or len(raw) > MAX_LINE:
                tail.skipping = False
                self._problem(tail, f"longer than {MAX_LINE} bytes")
                tail.line_no += 1
            else:
                self._take(tail, raw, at)

    def _take(self, tail: _Tail, raw: bytes, at: float) -> None:
        seq = tail.base + tail.line_no
        try:
            point = parse_line(raw, seq, at)
        except Malformed as exc:
            self._problem(tail, str(exc))
        else:
            if point is not None:
                tail.pending.append(point)
        tail.line_no += 1

    def _problem(self, tail: _Tail, why: str) -> None:
        tail.malformed += 1
        if not (tail.live and self._on_problem) or tail.malformed > SHOWN_PROBLEMS:
            return
        message = f"corral: metrics line {tail.line_no + 1} skipped: {why}"
        if tail.malformed == SHOWN_PROBLEMS:
            message += " (further malformed lines are skipped without a word)"
        self._on_problem(tail.trial_id, message)
