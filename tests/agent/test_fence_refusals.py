"""The agent's reaction to the stale-instance fence (``corral.domain.agent_fence``): a 409
to any call means its instance is fenced (shutting down, gone or declared lost), so it stops
its trials, shuts the instance down and exits at once, without sending anything again; a 410
means the trial has ended, so the agent stops it if it still runs and forgets it."""

from __future__ import annotations

from typing import Any

from agent_runtime.agent import EXIT_REFUSED
from tests.agent.conftest import FakeControlPlane, Harness, assignment, trial_script

SLEEPS = "import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.01)\n"
FENCED = "instance i-dev is TERMINATED: its writes are refused"
ENDED = "trial t-1 has ended (COMPLETED): its writes are refused"


def _running(make_agent: Any, plane: FakeControlPlane, tmp_path: Any) -> Harness:
    plane.heartbeat_replies.append({"start": [assignment("t-1", trial_script(tmp_path, SLEEPS))]})
    h: Harness = make_agent()
    h.step_until(lambda: "t-1" in h.agent.trials and "started" in plane.log_lines("t-1"))
    return h


def test_a_409_to_a_trial_status_fences_the_agent_at_once(make_agent, plane, tmp_path):
    h = _running(make_agent, plane, tmp_path)
    plane.refusals["/status"] = (409, FENCED)
    h.agent.trials["t-1"].stop(h.agent.trials["t-1"].state, 0, h.clock.monotonic())
    reports = len(plane.posts("/trials/t-1/status"))
    h.step_until(lambda: h.agent.exit_code is not None)
    assert h.agent.exit_code == EXIT_REFUSED
    assert h.shutdowns == [["fake-shutdown"]]
    # Refused once, sent once: no retry, and nothing at all is sent after the refusal.
    assert len(plane.posts("/trials/t-1/status")) == reports + 1
    assert plane.requests[-1].path.endswith("/trials/t-1/status")


def test_a_409_to_a_log_batch_fences_the_agent_and_the_lines_are_not_sent_again(
    make_agent, plane, tmp_path
):
    plane.refusals["/logs"] = (409, FENCED)
    plane.heartbeat_replies.append({"start": [assignment("t-1", trial_script(tmp_path, SLEEPS))]})
    h: Harness = make_agent()
    h.step_until(lambda: h.agent.exit_code is not None, timeout=10.0)
    assert h.agent.exit_code == EXIT_REFUSED
    assert h.shutdowns == [["fake-shutdown"]]
    assert len(plane.posts("/logs")) == 1
    assert h.agent.trials["t-1"].terminal  # stopped, not left running


def test_a_410_to_a_status_stops_the_trial_and_forgets_it(make_agent, plane, tmp_path):
    """The trial ended on the control plane (killed, or completed by another rank) while it
    runs here: its report is refused with 410. It is stopped, its end is not sent again by
    status or heartbeat, and the agent carries on."""
    plane.refusals["/status"] = (410, ENDED)
    plane.heartbeat_replies.append({"start": [assignment("t-1", trial_script(tmp_path, SLEEPS))]})
    h: Harness = make_agent()
    h.step_until(lambda: "t-1" in h.agent.trials)
    h.step_until(lambda: "t-1" not in h.agent.trials, advance=5.0, timeout=10.0)
    # "starting" refused, and nothing about it sent again, by status or heartbeat.
    assert [r.body["state"] for r in plane.posts("/trials/t-1/status")] == ["starting"]
    assert all(r.body["trials"] == [] for r in plane.posts("/heartbeat")[1:])
    assert h.agent.exit_code is None and h.shutdowns == []


def test_silence_is_timed_from_the_heartbeat_request_not_its_reply(make_agent, plane):
    """The control plane times an agent's silence from when its heartbeat arrived; the
    agent's fence must never fire later than that, so it times from when it sent it."""
    h: Harness = make_agent()
    h.step_until(lambda: h.agent.agent_id is not None)
    send = h.agent.client.heartbeat

    def slow(agent_id: str, request: Any) -> Any:
        reply = send(agent_id, request)
        h.clock.advance(8.0)  # the reply took 8 s to come back
        return reply

    h.agent.client.heartbeat = slow  # type: ignore[method-assign]
    n = len(plane.posts("/heartbeat"))
    h.step_until(lambda: len(plane.posts("/heartbeat")) > n, advance=5.0)
    assert h.agent.deadman.silent_for() >= 8.0


IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('started', flush=True)
while True:
    time.sleep(0.01)
"""


def test_a_cut_off_agents_trial_is_gone_before_the_control_plane_requeues_it(
    make_agent, plane, tmp_path
):
    """The budget the requeue relies on (docs/reliability.md, "Agent death to requeue"),
    with the control plane's own settings: cut off right after a heartbeat, the agent
    stops its trial at the fence and kills it a stop grace later (this one ignores
    SIGTERM), before the control plane's heartbeat timeout has passed since that heartbeat
    arrived, when the trial may start elsewhere."""
    from corral.services.shared.service_context import ServiceSettings

    settings = ServiceSettings()
    plane.register_reply["fence_after_s"] = settings.fence_after_s
    plane.register_reply["heartbeat_interval_s"] = settings.heartbeat_interval_s
    plane.heartbeat_replies.append(
        {"start": [assignment("t-1", trial_script(tmp_path, IGNORES_SIGTERM))]}
    )
    h: Harness = make_agent()
    h.step_until(lambda: "started" in plane.log_lines("t-1"))
    n = len(plane.posts("/heartbeat"))
    h.step_until(lambda: len(plane.posts("/heartbeat")) > n)
    # Sent (and so received and timed by the control plane) one tick ago, at the earliest.
    arrived = h.clock.monotonic() - 1.0
    plane.down = True
    run = h.agent.trials["t-1"]
    h.step_until(lambda: run.terminal, timeout=20.0)
    assert h.clock.monotonic() - arrived <= settings.reconcile.heartbeat_timeout_s
    assert run.state.value == "preempted" and run.exit_code != 0  # killed, not exited
