"""Trial metrics on the agent: parsing lines, tailing a run's file (partial last line,
malformed and overlong lines, restart), shipping with heartbeats, and the corral_trial
helper a trial imports."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from agent_runtime import trial_metrics
from agent_runtime.trial_metrics import Malformed, MetricsTailer, parse_line
from tests.agent.conftest import FakeClock, FakeControlPlane, assignment, trial_script

T0_US = 1_700_000_000_000_000  # FakeClock's wall clock, in microseconds


def line(kind: str = "validation", batches: int = 10, **values: float) -> bytes:
    return (
        json.dumps({"kind": kind, "batches": batches, "values": values or {"loss": 1}}) + "\n"
    ).encode()


# ---- parsing --------------------------------------------------------------------------------


def test_a_line_becomes_a_point_without_its_non_finite_values() -> None:
    p = parse_line(b'{"kind": "training", "batches": 5, "values": {"loss": 0.5, "x": NaN}}', 7, 1.0)
    assert p is not None
    assert (p.seq, p.kind, p.batches, p.values, p.at) == (7, "training", 5, {"loss": 0.5}, 1.0)
    assert parse_line(b'{"kind":"validation","batches":3.0,"values":{"a":1}}', 0, 0).batches == 3
    assert parse_line(b"   ", 0, 0.0) is None  # blank lines are not points (nor problems)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"kind": "test", "batches": 1, "values": {"a": 1}}', "kind must be one of"),
        (b'{"kind": "training", "batches": -1, "values": {"a": 1}}', "batches must be"),
        (b'{"kind": "training", "batches": true, "values": {"a": 1}}', "batches must be"),
        (b'{"kind": "training", "batches": 1.5, "values": {"a": 1}}', "batches must be"),
        (b'{"kind": "training", "batches": 1, "values": {}}', "non-empty object"),
        (b'{"kind": "training", "batches": 1, "values": {"a": "1"}}', "values.a must be a number"),
        (b'{"kind": "training", "batches": 1, "values": {"a": true}}', "values.a must be"),
        (b'{"kind": "training", "batches": 1, "values": {"": 1}}', "bad value name"),
        (b'{"kind": "training", "batches": 1, "values": {"a": Infinity}}', "no finite value"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_lines_say_what_is_wrong(raw: bytes, why: str) -> None:
    with pytest.raises(Malformed, match=why):
        parse_line(raw, 0, 0.0)


# ---- tailing --------------------------------------------------------------------------------


def tailer(clock: FakeClock) -> tuple[MetricsTailer, list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    return MetricsTailer(clock, on_problem=lambda t, m: problems.append((t, m))), problems


def shipped(t: MetricsTailer, limit: int = 100) -> list[tuple[int, dict[str, float]]]:
    """Take a batch, ack it, and return its (seq, values)."""
    batch, taken = t.batch(limit)
    t.acked(taken)
    return [(p.seq, p.values) for trial in batch for p in trial.points]


def test_only_complete_lines_are_read_until_the_run_ends(clock: FakeClock, tmp_path: Path) -> None:
    t, _ = tailer(clock)
    path = t.start_run("t1", tmp_path / "m")
    assert path == tmp_path / "m" / f"{T0_US}.jsonl" and path.read_bytes() == b""
    with path.open("ab") as f:
        f.write(line(loss=0.9) + line(loss=0.8)[:-9])  # the second line is half written
    assert shipped(t) == [(T0_US, {"loss": 0.9})]
    assert shipped(t) == []  # still half written
    with path.open("ab") as f:
        f.write(
            line(loss=0.8)[-9:] + b'{"kind": "validation", "batches": 30, "values": {"loss": 0.7}}'
        )
    assert shipped(t) == [(T0_US + 1, {"loss": 0.8})]
    t.end_run("t1")  # the trial exited: its last line needs no newline
    assert shipped(t) == [(T0_US + 2, {"loss": 0.7})]
    assert not path.exists() and t.backlog() == 0  # every point accepted: the file goes


def test_malformed_and_overlong_lines_are_skipped_counted_and_named(
    clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trial_metrics, "MAX_LINE", 100)
    t, problems = tailer(clock)
    path = t.start_run("t1", tmp_path)
    overlong = b'{"kind": "validation", "values": {"x": 1}, "pad": "' + b"x" * 200 + b'"}\n'
    path.write_bytes(line(a=1) + b"garbage\n" + overlong + b"\n" + line(a=2))
    assert [seq - T0_US for seq, _ in shipped(t)] == [0, 4]  # numbered by line, blanks too
    assert problems == [
        ("t1", "corral: metrics line 2 skipped: not JSON"),
        ("t1", "corral: metrics line 3 skipped: longer than 100 bytes"),
    ]


def test_an_overlong_line_arriving_in_pieces_is_dropped_as_it_comes(
    clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trial_metrics, "MAX_LINE", 100)
    t, problems = tailer(clock)
    path = t.start_run("t1", tmp_path)
    path.write_bytes(b"y" * 150)
    assert shipped(t) == []
    with path.open("ab") as f:
        f.write(b"y" * 150 + b"\n" + line(a=1))
    assert [seq - T0_US for seq, _ in shipped(t)] == [1]
    assert len(problems) == 1 and "longer than 100 bytes" in problems[0][1]


def test_an_overlong_unterminated_last_line_does_not_hold_the_ended_run(
    clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run ended with a huge line and no newline: it is dropped, counted, and the run's
    # file is let go (the agent's exit waits for its metrics backlog to drain).
    monkeypatch.setattr(trial_metrics, "MAX_LINE", 100)
    t, problems = tailer(clock)
    path = t.start_run("t1", tmp_path)
    path.write_bytes(line(a=1) + b"y" * 150)
    assert [seq - T0_US for seq, _ in shipped(t)] == [0]
    t.end_run("t1")
    for _ in range(3):
        shipped(t)
    assert t.backlog() == 0 and not path.exists()
    assert len(problems) == 1 and "longer than 100 bytes" in problems[0][1]


def test_only_the_first_problems_reach_the_trials_log(clock: FakeClock, tmp_path: Path) -> None:
    t, problems = tailer(clock)
    path = t.start_run("t1", tmp_path)
    path.write_bytes(b"bad\n" * 25)
    assert shipped(t) == []
    assert len(problems) == trial_metrics.SHOWN_PROBLEMS
    assert problems[-1][1].endswith("(further malformed lines are skipped without a word)")


def test_unsent_points_stay_until_acked_and_a_retry_keeps_them(
    clock: FakeClock, tmp_path: Path
) -> None:
    t, _ = tailer(clock)
    path = t.start_run("t1", tmp_path)
    path.write_bytes(b"".join(line(a=n) for n in range(5)))
    first, taken = t.batch(3)
    assert [p.seq - T0_US for p in first[0].points] == [0, 1, 2]
    again, taken = t.batch(3)  # the heartbeat failed: the same points go again
    assert [p.seq - T0_US for p in again[0].points] == [0, 1, 2]
    t.acked(taken, retry={"t1"})  # the control plane lost a race: send them again
    assert [seq - T0_US for seq, _ in shipped(t, 3)] == [0, 1, 2]
    assert [seq - T0_US for seq, _ in shipped(t, 3)] == [3, 4]


def test_reading_stops_at_the_pending_bound(
    clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trial_metrics, "MAX_PENDING", 4)
    t, _ = tailer(clock)
    path = t.start_run("t1", tmp_path)
    path.write_bytes(b"".join(line(a=n) for n in range(10)))
    t.batch(0)
    assert len(t._tails[path].pending) == 4  # the rest waits in the file
    assert [seq - T0_US for seq, _ in shipped(t, 100)] == [0, 1, 2, 3]
    assert [seq - T0_US for seq, _ in shipped(t, 100)] == [4, 5, 6, 7]


def test_a_restarted_agent_ships_leftover_files_with_the_same_numbers(
    clock: FakeClock, tmp_path: Path
) -> None:
    trials = tmp_path / "trials"
    first, _ = tailer(clock)
    path = first.start_run("t1", trials / "t1" / "metrics")
    path.write_bytes(line(a=1) + line(a=2) + line(a=3))
    sent, _ = first.batch(2)  # shipped, but the agent died before the reply
    second, _ = tailer(clock)  # a new process on the same disk
    assert second.recover(trials) == 1
    assert second.backlog() == 1  # it waits for these before exiting
    assert [seq for seq, _ in shipped(second)] == [p.seq for p in sent[0].points] + [T0_US + 2]
    assert not path.exists()
    # A new run of the trial starts after the recovered one, never reusing its numbers.
    later = second.start_run("t1", trials / "t1" / "metrics")
    assert int(later.stem) > T0_US


def test_an_unreadable_file_never_stops_the_heartbeat(clock: FakeClock, tmp_path: Path) -> None:
    t, _ = tailer(clock)
    path = t.start_run("t1", tmp_path)
    path.unlink()
    path.mkdir()  # reading it fails with IsADirectoryError
    assert shipped(t) == []
    t.end_run("t1")
    assert shipped(t) == [] and t.backlog() == 0  # an ended run gives up on it


def test_runs_of_one_trial_never_share_numbers(clock: FakeClock, tmp_path: Path) -> None:
    t, _ = tailer(clock)
    a = t.start_run("t1", tmp_path)
    t.end_run("t1")
    b = t.start_run("t1", tmp_path)  # same clock reading: still a later base
    assert int(b.stem) > int(a.stem)


# ---- the helper a trial imports -------------------------------------------------------------


@pytest.fixture
def helper(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    from agent_runtime.trial_env import HELPER_DIR

    monkeypatch.syspath_prepend(str(HELPER_DIR))
    module = importlib.import_module("corral_trial")
    monkeypatch.setenv("CORRAL_METRICS_FILE", str(tmp_path / "m.jsonl"))
    monkeypatch.delenv("RANK", raising=False)
    return module


def test_the_helper_appends_lines_the_agent_reads(
    helper: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert helper.report_training(10, loss=0.5, lr=1)
    assert helper.report_validation(10, loss=float("nan"), accuracy=0.75)
    assert not helper.report_validation(11, loss=float("inf"))  # nothing finite: no line
    raw = (tmp_path / "m.jsonl").read_bytes().splitlines()
    points = [parse_line(r, n, 0.0) for n, r in enumerate(raw)]
    assert [(p.kind, p.batches, p.values) for p in points if p] == [
        ("training", 10, {"loss": 0.5, "lr": 1.0}),
        ("validation", 10, {"accuracy": 0.75}),
    ]
    assert "loss=nan is not reported" in capsys.readouterr().err


def test_the_helper_refuses_bad_input_and_is_quiet_elsewhere(
    helper: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        helper.report("test", 1, loss=1.0)
    with pytest.raises(ValueError, match="batches must be"):
        helper.report_training(-1, loss=1.0)
    with pytest.raises(TypeError, match="loss must be a number"):
        helper.report_training(1, loss="low")
    monkeypatch.setenv("RANK", "3")  # not the reporting process
    assert not helper.report_training(1, loss=1.0)
    monkeypatch.delenv("CORRAL_METRICS_FILE")  # run by hand, outside Corral
    monkeypatch.delenv("RANK")
    assert not helper.report_training(1, loss=1.0)
    assert not (tmp_path / "m.jsonl").exists()


# ---- the agent ships them -------------------------------------------------------------------

REPORTING = """
import corral_trial, os
corral_trial.report_training(1, loss=0.9)
corral_trial.report_validation(1, validation_loss=0.8)
with open(os.environ["CORRAL_METRICS_FILE"], "a") as f:
    f.write("oops\\n")
corral_trial.report_validation(2, validation_loss=0.7)
"""


def _points(plane: FakeControlPlane, trial_id: str) -> list[dict[str, Any]]:
    return [
        p
        for r in plane.posts("/heartbeat")
        for m in r.body.get("metrics", [])
        if m["trial_id"] == trial_id
        for p in m["points"]
    ]


def test_the_agent_ships_a_trials_metrics_with_heartbeats(make_agent, plane, tmp_path):
    plane.heartbeat_replies.append(
        {"start": [assignment("t-1", trial_script(tmp_path, REPORTING))]}
    )
    h = make_agent()

    def exit_reported() -> bool:
        return any(r.body.get("state") == "exited" for r in plane.posts("/status"))

    # Until the trial's end is reported: its points may ship in a heartbeat while it runs,
    # but every one of them must have gone before the end.
    h.step_until(exit_reported, advance=5.0)
    points = _points(plane, "t-1")
    assert [(p["kind"], p["batches"], p["values"]) for p in points] == [
        ("training", 1, {"loss": 0.9}),
        ("validation", 1, {"validation_loss": 0.8}),
        ("validation", 2, {"validation_loss": 0.7}),
    ]
    seqs = [p["seq"] for p in points]
    assert seqs == sorted(seqs) and seqs[3 - 1] - seqs[0] == 3  # line 3 was the bad one
    # The last points went before the trial's end was reported: a finished trial shows them.
    with plane.lock:
        order = [r for r in plane.requests if r.path.endswith(("/heartbeat", "/status"))]
    exited = next(
        n for n, r in enumerate(order) if r.path.endswith("/status") and r.body["state"] == "exited"
    )
    carried = [
        n
        for n, r in enumerate(order)
        if any(m["trial_id"] == "t-1" for m in (r.body or {}).get("metrics", []))
    ]
    assert carried and max(carried) < exited
    h.step_until(lambda: "corral: metrics line 3 skipped: not JSON" in plane.log_lines("t-1"))
    h.step_until(lambda: h.agent.trial_metrics.backlog() == 0, advance=5.0)
    assert not list((tmp_path / "work" / "trials" / "t-1" / "metrics").glob("*.jsonl"))
    assert len(_points(plane, "t-1")) == 3  # accepted once, never sent again


def test_other_node_ranks_report_nothing(make_agent, plane, tmp_path):
    rendezvous = {
        "master_addr": "10.0.0.1",
        "world_size": 2,
        "node_rank": 1,
        "nnodes": 2,
        "local_world_size": 1,
    }
    entry = trial_script(tmp_path, REPORTING)
    plane.heartbeat_replies.append({"start": [assignment("t-2", entry, rendezvous=rendezvous)]})
    h = make_agent()
    h.step_until(lambda: any(s["state"] == "exited" for s in plane.statuses("t-2")), advance=5.0)
    h.step_until(lambda: len(plane.posts("/heartbeat")) > 3, advance=5.0)
    assert _points(plane, "t-2") == []
    assert not (tmp_path / "work" / "trials" / "t-2" / "metrics").exists()
