"""Read models: derived experiment state, and figures computed at read time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral.api import views
from corral.domain.records import Experiment, ExperimentState
from corral.domain.trial import Trial, TrialState, new_trial
from tests.services.harness import Cluster, Script

ES = ExperimentState
T = TrialState


def _experiment(n: int, killed: bool = False) -> Experiment:
    return Experiment(
        id="exp-1",
        name="e",
        pool="gpu",
        submitted_at=0.0,
        config={},
        trial_ids=tuple(f"t{i}" for i in range(n)),
        killed_at=5.0 if killed else None,
    )


def _trials(*states: TrialState) -> list[Trial]:
    return [
        replace(new_trial(f"t{i}", "exp-1", "gpu", 1, 0.0), state=s) for i, s in enumerate(states)
    ]


@pytest.mark.parametrize(
    ("states", "killed", "expected"),
    [
        ((T.PENDING, T.COMPLETED), False, ES.ACTIVE),
        ((T.RUNNING, T.COMPLETED), True, ES.STOPPING),
        ((T.COMPLETED, T.COMPLETED), False, ES.COMPLETED),
        ((T.COMPLETED, T.FAILED), False, ES.FAILED),
        ((T.COMPLETED, T.CANCELLED), True, ES.CANCELLED),
        ((T.COMPLETED, T.COMPLETED), True, ES.COMPLETED),  # killed after it finished
        ((T.COMPLETED,), False, ES.ACTIVE),  # one trial not written yet (crashed submit)
    ],
)
def test_experiment_state_is_derived(
    states: tuple[TrialState, ...], killed: bool, expected: ExperimentState
) -> None:
    experiment = _experiment(2, killed)
    assert views.experiment_state(experiment, _trials(*states)) is expected


def test_instance_view_idle_time_and_cost_grow_with_the_clock() -> None:
    cluster = Cluster()
    submitted = cluster.submit()
    cluster.scripts[submitted.trials[0].id] = Script(duration_s=30)
    cluster.pump()
    cluster.run(120)  # boots, runs the trial, goes idle
    (before,) = views.list_instances(cluster.ctx).instances
    assert before.state == "IDLE" and before.idle_s is not None
    cluster.clock.advance(100)
    (after,) = views.list_instances(cluster.ctx).instances
    assert after.idle_s == pytest.approx(before.idle_s + 100)
    assert after.cost_usd > before.cost_usd
    assert after.heartbeat_age_s is not None and after.heartbeat_age_s >= 100
    trial = views.trial_view(cluster.ctx, submitted.trials[0].id)
    assert trial.state == "COMPLETED" and trial.cost_usd > 0
    detail = views.experiment_detail(cluster.ctx, submitted.experiment.id)
    assert detail.cost_usd == trial.cost_usd and detail.state == "COMPLETED"
