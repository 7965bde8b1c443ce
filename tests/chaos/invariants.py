"""The checks at the end of a soak. Each returns violations as one line of text each."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from corral.domain.trial import Trial, TrialState
from tests.chaos.aws import START
from tests.chaos.fleet import Life
from tests.chaos.mailbox import DeadLetter
from tests.chaos.trials import Execution, TrialSpec
from tests.chaos.workload import Job

TERMINAL = {TrialState.COMPLETED, TrialState.FAILED, TrialState.CANCELLED}


@dataclass(frozen=True)
class Deadlines:
    """When an instance must be gone at the latest (seconds), by what happened to it."""

    idle_s: float
    reap_period_s: float = 60.0
    reconcile_period_s: float = 120.0
    starting_s: float = 300.0  # the pool's max_agent_starting_period
    lost_s: float = 90.0  # heartbeat timeout: declared lost and terminated in the same pass
    slack_s: float = 30.0  # the soak's step, a delivery in flight


def outcomes(jobs: Iterable[Job], trials: dict[str, Trial]) -> list[str]:
    """Every trial ended COMPLETED, FAILED with its own exit code, or CANCELLED by its user."""
    out = []
    for job in jobs:
        if job.experiment_id is None or job.experiment_id.startswith("refused-"):
            out.append(f"job {job.index}: never accepted ({job.experiment_id})")
            continue
        for n, spec in enumerate(job.specs):
            tid = f"{job.experiment_id}.t{n:04d}"
            trial = trials.get(tid)
            if trial is None:
                out.append(f"{tid}: missing from the store")
                continue
            problem = _outcome(job, spec, trial)
            if problem:
                out.append(f"{tid} ({spec.text()}, {job.slots} GPU): {problem}")
    return out


def _outcome(job: Job, spec: TrialSpec, trial: Trial) -> str | None:
    expected = job.expected_exit(spec)
    if trial.state not in TERMINAL:
        return f"ended {trial.state.value} (not terminal)"
    if trial.state is TrialState.CANCELLED:
        return None if job.killed_at is not None else "CANCELLED but its user never killed it"
    if trial.state is TrialState.COMPLETED:
        return None if expected == 0 else f"COMPLETED, but every run exits {expected}"
    if trial.exit_code != expected or expected == 0:
        return f"FAILED with exit code {trial.exit_code}; its own code is {expected}"
    return None


def overlaps(runs: list[Execution]) -> list[str]:
    """No trial ever ran on two agents at once, except the ranks of one gang attempt."""
    out = []
    by_trial: dict[str, list[Execution]] = defaultdict(list)
    for run in runs:
        by_trial[run.trial_id].append(run)
    for tid, mine in by_trial.items():
        for i, a in enumerate(mine):
            for b in mine[i + 1 :]:
                if a.cloud_id == b.cloud_id or not _concurrent(a, b):
                    continue
                same_gang = a.nnodes == b.nnodes > 1 and a.master == b.master
                if same_gang and a.node_rank != b.node_rank:
                    continue
                out.append(
                    f"{tid}: ran on {a.cloud_id} (rank {a.node_rank}/{a.nnodes}, from "
                    f"+{a.start - START:.0f} s) and {b.cloud_id} (rank {b.node_rank}/{b.nnodes}, "
                    f"from +{b.start - START:.0f} s) at once, {_overlap(a, b):.0f} s"
                )
    return out


def _concurrent(a: Execution, b: Execution) -> bool:
    return _overlap(a, b) > 0


def _overlap(a: Execution, b: Execution) -> float:
    end_a = a.end if a.end is not None else float("inf")
    end_b = b.end if b.end is not None else float("inf")
    return min(end_a, end_b) - max(a.start, b.start)


def launches(lives: dict[str, Life], by_token: dict[str, list[str]]) -> list[str]:
    """One instance per launch token, and one per launch record."""
    out = [f"token {t}: {len(ids)} instances {ids}" for t, ids in by_token.items() if len(ids) > 1]
    by_record: dict[str, list[str]] = defaultdict(list)
    for life in lives.values():
        if life.record_id:
            by_record[life.record_id].append(life.cloud_id)
    out += [
        f"record {r}: {len(ids)} instances {ids}" for r, ids in by_record.items() if len(ids) > 1
    ]
    return out


def foreign_untouched(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
) -> list[str]:
    out = []
    for cloud_id, was in before.items():
        now = after.get(cloud_id)
        if now is None or now["State"]["Name"] != "running":
            state = now["State"]["Name"] if now else "gone"
            out.append(f"foreign instance {cloud_id} {_tags(was)} is {state}")
        elif _tags(now) != _tags(was):
            out.append(f"foreign instance {cloud_id} retagged: {_tags(was)} -> {_tags(now)}")
    return out


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags") or []}


def billing(
    lives: dict[str, Life],
    last_trial_end: float,
    end: float,
    d: Deadlines,
    fates: dict[str, str],
    reaper_deaths: list[float],
) -> list[str]:
    """Every instance terminated once idle: none billed past the last trial's end plus the
    idle period and one reap period (later only for what a fault explains: an instance that
    never registered, an agent that died or went silent for a while, a reaper invocation
    that died: each such death in the window costs one more period)."""
    base = last_trial_end + d.idle_s + d.reap_period_s + d.slack_s
    for at in sorted(reaper_deaths):
        if last_trial_end <= at <= base:
            base += d.reap_period_s
    out = []
    for cloud_id, life in sorted(lives.items()):
        deadline = base
        fate = fates.get(cloud_id, "")
        if fate == "never-registered":
            deadline = max(
                deadline, life.first_seen + d.starting_s + d.reconcile_period_s + d.slack_s
            )
        elif fate.startswith("silent-since:"):
            silent = float(fate.split(":", 1)[1])
            deadline = max(deadline, silent + d.lost_s + d.reconcile_period_s + d.slack_s)
        elif fate.startswith("silent-until:"):  # back before it was declared lost (or refused)
            back = float(fate.split(":", 1)[1]) + d.reconcile_period_s
            deadline = max(deadline, back + d.idle_s + d.reap_period_s + d.slack_s)
        gone = life.gone_at if life.gone_at is not None else end
        if gone > deadline:
            what = (
                "still running at the end"
                if life.gone_at is None
                else f"terminated at +{gone - deadline:.0f} s late"
            )
            out.append(f"{cloud_id} ({fate or 'healthy'}): billed past its deadline, {what}")
    return out


def dead_letters(dead: list[DeadLetter]) -> list[str]:
    return [
        f"DLQ {d.queue.value}: {d.delivery.body[:120]} after {d.delivery.failures}"
        for d in dead
        if not d.explained
    ]
