"""The deadlines of ASSIGNED and STOPPING trials: which are overdue, and what happens."""

from __future__ import annotations

from corral.domain.records import Heartbeat, TrialReport
from corral.domain.trial import Placement, Trial, TrialState, new_trial
from corral.domain.trial_deadlines import OverdueAction, TrialDeadlines, overdue_trials

D = TrialDeadlines(ack_s=120, start_s=1800, stop_s=300)


def _assigned(at: float, *agents: str) -> Trial:
    trial = new_trial("t1", "e1", "gpu", len(agents), 0.0)
    return trial.assigned(Placement(tuple((a, (0,)) for a in agents)), at)


def _beat(agent: str, at: float, *trial_ids: str) -> Heartbeat:
    return Heartbeat(agent, at, tuple(TrialReport(t, "running") for t in trial_ids))


def test_an_assignment_within_its_ack_period_is_left_alone() -> None:
    trial = _assigned(100, "a")
    assert overdue_trials([trial], {"a": _beat("a", 210)}, 215, D) == []


def test_an_agent_heartbeating_without_the_trial_past_the_ack_period() -> None:
    trial = _assigned(100, "a")
    (overdue,) = overdue_trials([trial], {"a": _beat("a", 219)}, 221, D)
    assert overdue.action is OverdueAction.REQUEUE and "a did not take it" in overdue.reason


def test_one_member_of_a_gang_not_taking_it_requeues_the_gang() -> None:
    trial = _assigned(100, "a", "b")
    beats = {"a": _beat("a", 219, "t1"), "b": _beat("b", 219)}
    (overdue,) = overdue_trials([trial], beats, 221, D)
    assert "b did not take it" in overdue.reason


def test_silent_agents_are_left_to_the_reconciler_until_the_start_deadline() -> None:
    trial = _assigned(100, "a")
    stale = {"a": _beat("a", 90)}
    assert overdue_trials([trial], stale, 1000, D) == []
    assert overdue_trials([trial], {}, 1000, D) == []
    (overdue,) = overdue_trials([trial], stale, 1901, D)
    assert overdue.action is OverdueAction.REQUEUE and "not started within" in overdue.reason


def test_an_agent_reporting_the_trial_starting_gets_the_whole_start_period() -> None:
    trial = _assigned(100, "a")
    assert overdue_trials([trial], {"a": _beat("a", 1800, "t1")}, 1800, D) == []


def test_a_stop_past_its_deadline_is_cancelled() -> None:
    trial = _assigned(100, "a").transition(TrialState.STOPPING, 200, "killed")
    assert overdue_trials([trial], {"a": _beat("a", 499, "t1")}, 499, D) == []
    (overdue,) = overdue_trials([trial], {"a": _beat("a", 501, "t1")}, 501, D)
    assert overdue.action is OverdueAction.CANCEL


def test_other_states_have_no_deadline_here() -> None:
    trial = _assigned(100, "a").transition(TrialState.RUNNING, 110, "started")
    pending = new_trial("t2", "e1", "gpu", 1, 0.0)
    assert overdue_trials([trial, pending], {}, 10_000, D) == []


def test_an_assignment_at_time_zero_is_timed_from_it_not_from_the_submission() -> None:
    # 0.0 is a real time (a fake clock's start): the deadline counts from it, not from an
    # earlier submission.
    trial = new_trial("t1", "e1", "gpu", 1, -500.0).assigned(Placement((("a", (0,)),)), 0.0)
    assert overdue_trials([trial], {"a": _beat("a", 95)}, 100, D) == []
