"""Reading traces: both formats, and problems named by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.sim.trace import TraceError, TraceFormat, read_trace

OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_canonical_rows_with_optional_columns(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "submit_s,gpus,duration_s,name,priority,checkpoint_interval_s\n"
        "60,2,100,b,10,\n0,1,50.5,a,,600\n",
    )
    trace = read_trace(path)
    assert [j.name for j in trace.jobs] == ["a", "b"]  # sorted by submit time
    assert trace.jobs[0].checkpoint_interval_s == 600.0
    assert trace.jobs[0].priority == 42
    assert trace.jobs[1].priority == 10
    assert trace.gpu_seconds == 50.5 + 200


def test_bad_rows_are_named_by_file_line_and_column(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "submit_s,gpus,duration_s,priority\n0,1,10,\n5,one,10,\n5,1,-3,\n5,0,10,\n5,1,10,100\n",
    )
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert caught.value.problems == [
        f"{path}:3: gpus: must be a number, got 'one'",
        f"{path}:4: duration_s: must be >= 0, got '-3'",
        f"{path}:5: gpus: must be >= 1 (the simulator replays GPU jobs only)",
        f"{path}:6: priority: must be 1 to 99 (lower runs first), got '100'",
    ]


def test_missing_columns_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"t.csv:1: missing column\(s\): duration_s"):
        read_trace(write(tmp_path, "submit_s,gpus\n0,1\n"))
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "absent.csv")


def test_alibaba_openb_rounds_shared_gpus_up_and_skips_what_never_ran(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        OPENB_HEADER
        + "p0,1,1,1,1000,,LS,Running,0,100,10\n"
        + "p1,1,1,1,460,,LS,Running,5,50,5\n"  # a shared GPU: one whole GPU
        + "p2,1,1,0,0,,LS,Running,5,50,5\n"  # CPU only
        + "p3,1,1,1,1000,,BE,Pending,7,9,\n"  # never scheduled
        + "p4,1,1,8,1000,,LS,Failed,20,80,30\n",
    )
    trace = read_trace(path, TraceFormat.ALIBABA_OPENB)
    assert [(j.name, j.submit_s, j.gpus, j.duration_s) for j in trace.jobs] == [
        ("p0", 0, 1, 90),
        ("p1", 5, 1, 45),
        ("p4", 20, 8, 50),
    ]
    assert trace.skipped == {
        "CPU-only pod (num_gpu 0)": 1,
        "never scheduled (no scheduled_time)": 1,
    }


def test_alibaba_openb_bad_times_are_named(tmp_path: Path) -> None:
    path = write(tmp_path, OPENB_HEADER + "p0,1,1,1,1000,,LS,Running,0,10,20\n")
    with pytest.raises(TraceError, match=r"t.csv:2: deletion_time: must be after scheduled_time"):
        read_trace(path, TraceFormat.ALIBABA_OPENB)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    # Excel's "CSV UTF-8" starts the file with a BOM; it was read as part of the first
    # column's name, which then was "missing".
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfsubmit_s,gpus,duration_s\n0,1,100\n")
    trace = read_trace(path)
    assert [(j.submit_s, j.gpus, j.duration_s) for j in trace.jobs] == [(0.0, 1, 100.0)]


def test_times_beyond_two_years_are_refused(tmp_path: Path) -> None:
    # 1e300 as a duration or submit time made the replay run for minutes without end.
    two_years = 2 * 365 * 86400
    path = write(
        tmp_path,
        f"submit_s,gpus,duration_s\n0,1,1e300\n1e300,1,100\n{two_years},1,{two_years}\n"
        f"{two_years + 1},1,100\n",
    )
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    bound = "must be at most 63072000 (two years in seconds)"
    assert caught.value.problems == [
        f"{path}:2: duration_s: {bound}, got '1e300'",
        f"{path}:3: submit_s: {bound}, got '1e300'",
        f"{path}:5: submit_s: {bound}, got '63072001'",
    ]


def test_alibaba_openb_times_beyond_two_years_are_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        OPENB_HEADER
        + "p0,1000,1,1,1000,,LS,Running,1e300,20,10\n"
        + "p1,1000,1,1,1000,,LS,Running,0,1e300,10\n",
    )
    with pytest.raises(TraceError) as caught:
        read_trace(path, TraceFormat.ALIBABA_OPENB)
    assert caught.value.problems == [
        f"{path}:2: creation_time: must be at most 63072000 (two years in seconds), got '1e300'",
        f"{path}:3: deletion_time: the pod ran 1e+300 s (deletion_time - scheduled_time),"
        " must be at most 63072000 (two years in seconds)",
    ]
