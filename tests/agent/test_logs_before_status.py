"""A trial's last log lines reach the control plane before its terminal status, and the status
says where the run's log stream ends, so a reader that stops at the terminal state (``corral
command run``) never misses output."""

from __future__ import annotations

from collections.abc import Callable

from tests.agent.conftest import FakeControlPlane, Recorded, assignment, trial_script

FIVE_LINES_EXIT_3 = """
import sys
for n in range(5):
    print("line", n)
sys.exit(3)
"""


def _request_index(plane: FakeControlPlane, pred: Callable[[Recorded], bool]) -> int:
    with plane.lock:
        return next(i for i, r in enumerate(plane.requests) if pred(r))


def test_remaining_logs_are_flushed_before_the_terminal_status(make_agent, plane, tmp_path):
    plane.heartbeat_replies.append(
        {"start": [assignment("t-echo", trial_script(tmp_path, FIVE_LINES_EXIT_3))]}
    )
    # The timer flush never comes during the test: only the end of the run may ship the lines.
    h = make_agent(log_flush_interval_s=3600.0)
    h.step_until(lambda: any(s["state"] == "exited" for s in plane.statuses("t-echo")))

    assert plane.log_lines("t-echo") == [f"line {n}" for n in range(5)]
    status_at = _request_index(
        plane, lambda r: r.path.endswith("/trials/t-echo/status") and r.body["state"] == "exited"
    )
    with plane.lock:
        before = plane.requests[:status_at]
    shipped = [x for r in before if r.path.endswith("/trials/t-echo/logs") for x in r.body["lines"]]
    assert [x["line"] for x in shipped] == [f"line {n}" for n in range(5)]
    final = next(s for s in plane.statuses("t-echo") if s["state"] == "exited")
    assert final["exit_code"] == 3
    assert final["log_end_seq"] == max(x["seq"] for x in shipped)


def test_a_run_without_output_ends_its_log_stream_at_minus_one(make_agent, plane, tmp_path):
    plane.heartbeat_replies.append(
        {"start": [assignment("t-quiet", trial_script(tmp_path, "pass\n"))]}
    )
    h = make_agent(log_flush_interval_s=3600.0)
    h.step_until(lambda: any(s["state"] == "exited" for s in plane.statuses("t-quiet")))
    final = next(s for s in plane.statuses("t-quiet") if s["state"] == "exited")
    assert final["exit_code"] == 0 and final["log_end_seq"] == -1
