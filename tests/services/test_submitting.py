"""Submissions: bad input names the field and writes nothing; retries are idempotent."""

from __future__ import annotations

import pytest

from corral.domain.config import ExperimentConfig
from corral.ports.queue import QueueName
from corral.services.submit import SubmitError, submit_experiment

from .harness import SPOT_4, Cluster, make_pool


def snapshot(cluster: Cluster) -> tuple[int, int, int, int]:
    return (
        len(cluster.store.experiments()),
        len(cluster.store.trials()),
        len(cluster.store.events()),
        cluster.queue.pending(QueueName.SCHEDULE),
    )


@pytest.mark.parametrize(
    ("config", "field", "reason"),
    [
        (
            {"resources": {"slots_per_trial": 13}},
            "resources.slots_per_trial",
            "needs 13 GPUs but pool gpu holds at most 12 (3 instances x 4 GPUs)",
        ),
        (
            {"resources": {"resource_pool": "tpu"}},
            "resources.resource_pool",
            "no pool named 'tpu' (pools: gpu)",
        ),
    ],
)
def test_a_submission_that_can_never_run_is_rejected_with_its_field(
    config: dict[str, object], field: str, reason: str
) -> None:
    cluster = Cluster(make_pool(SPOT_4, max_instances=3))
    before = snapshot(cluster)
    with pytest.raises(SubmitError) as raised:
        cluster.submit(**config)
    assert (raised.value.field, raised.value.reason) == (field, reason)
    assert snapshot(cluster) == before


def test_a_retried_submission_with_the_same_client_token_creates_one_experiment() -> None:
    cluster = Cluster()
    config = ExperimentConfig.model_validate(
        {
            "entrypoint": "python train.py",
            "searcher": {"name": "grid"},
            "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.01, 0.001]}},
        }
    )
    first = submit_experiment(cluster.ctx, config, owner="alice", client_token="tok-1")
    again = submit_experiment(cluster.ctx, config, owner="alice", client_token="tok-1")
    assert first.created and not again.created
    assert first.experiment.id == again.experiment.id
    assert len(cluster.store.trials()) == 3
    other = submit_experiment(cluster.ctx, config, owner="bob", client_token="tok-1")
    assert other.experiment.id != first.experiment.id


def test_a_client_token_reused_for_another_config_is_refused_and_changes_nothing() -> None:
    # The second config's extra trials were added to the first experiment and ran under its
    # entrypoint, billed, while the CLI said "created".
    cluster = Cluster()
    grid = ExperimentConfig.model_validate(
        {
            "entrypoint": "python train.py",
            "searcher": {"name": "grid"},
            "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.01]}},
        }
    )
    wider = ExperimentConfig.model_validate(
        grid.model_dump(mode="json")
        | {"hyperparameters": {"lr": {"type": "categorical", "vals": [1, 2, 3, 4]}}}
    )
    first = submit_experiment(cluster.ctx, grid, owner="alice", client_token="tok-1")
    before = snapshot(cluster)
    with pytest.raises(SubmitError) as raised:
        submit_experiment(cluster.ctx, wider, owner="alice", client_token="tok-1")
    assert raised.value.field == "client_token"
    assert first.experiment.id in raised.value.reason
    assert snapshot(cluster) == before


def test_a_crash_halfway_through_a_submission_is_completed_by_the_retry() -> None:
    cluster = Cluster()
    cluster.ctx.settings = type(cluster.ctx.settings)(max_commit=2)
    config = ExperimentConfig.model_validate(
        {
            "entrypoint": "python train.py",
            "searcher": {"name": "grid"},
            "hyperparameters": {"lr": {"type": "categorical", "vals": [1, 2, 3, 4, 5]}},
        }
    )
    real_commit = cluster.store.commit
    calls = {"n": 0}

    def dies_on_third_commit(records):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("function timed out")
        return real_commit(records)

    cluster.store.commit = dies_on_third_commit  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        submit_experiment(cluster.ctx, config, client_token="tok")
    cluster.store.commit = real_commit  # type: ignore[method-assign]
    assert len(cluster.store.trials()) == 2
    done = submit_experiment(cluster.ctx, config, client_token="tok")
    assert len(done.trials) == 5 and len(cluster.store.trials()) == 5
