"""``checkpoint_storage.endpoint_url`` (S3-compatible storage: MinIO, the local stack's moto)
reaches the trial: it was parsed and then dropped, so a trial's SDK wrote to AWS S3 instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_runtime.trial_env import checkpoint_dir, trial_env
from corral.domain.config import ConfigError, ExperimentConfig, validate
from corral.services.shared.assignment_spec import build_assignment

from .harness import Cluster

MINIO = "http://minio.internal:9000"


def _placed_assignment(cluster: Cluster, **config: object):  # type: ignore[no-untyped-def]
    trial_id = cluster.submit(**config).trials[0].id
    for _ in range(120):  # an instance boots, its agent registers, the trial is placed
        cluster.step()
        trial = cluster.store.get_trial(trial_id)
        if trial is not None and trial.placement is not None:
            break
    assert trial is not None and trial.placement is not None
    assignment = build_assignment(cluster.ctx, trial, trial.placement.parts[0][0])
    assert assignment is not None
    return assignment


def test_an_s3_endpoint_reaches_the_trials_environment(tmp_path: Path) -> None:
    storage = {"type": "s3", "bucket": "ckpt", "prefix": "p", "endpoint_url": MINIO}
    assignment = _placed_assignment(Cluster(), checkpoint_storage=storage)
    assert assignment.checkpoint.endpoint_url == MINIO
    assert assignment.checkpoint.storage_uri.startswith("s3://ckpt/p/")
    ckpt = checkpoint_dir(assignment, tmp_path)
    env = trial_env(assignment, agent_id="a", checkpoint_path=ckpt, proxies={}, in_container=True)
    assert env["AWS_ENDPOINT_URL_S3"] == MINIO  # what boto3, the CLI and other SDKs read
    assert env["CORRAL_CHECKPOINT_ENDPOINT_URL"] == MINIO


def test_the_experiments_own_sdk_endpoint_wins_but_corrals_name_does_not_move(
    tmp_path: Path,
) -> None:
    storage = {"type": "s3", "bucket": "ckpt", "endpoint_url": MINIO}
    own = {
        "AWS_ENDPOINT_URL_S3": "https://s3.eu-west-1.amazonaws.com",
        "CORRAL_CHECKPOINT_ENDPOINT_URL": "http://spoofed",
    }
    assignment = _placed_assignment(
        Cluster(),
        checkpoint_storage=storage,
        environment={"environment_variables": own},
    )
    env = trial_env(
        assignment,
        agent_id="a",
        checkpoint_path=checkpoint_dir(assignment, tmp_path),
        proxies={},
        in_container=True,
    )
    assert env["AWS_ENDPOINT_URL_S3"] == "https://s3.eu-west-1.amazonaws.com"
    assert env["CORRAL_CHECKPOINT_ENDPOINT_URL"] == MINIO


def test_without_an_endpoint_the_trial_gets_none(tmp_path: Path) -> None:
    assignment = _placed_assignment(Cluster(), checkpoint_storage={"type": "s3", "bucket": "ckpt"})
    assert assignment.checkpoint.endpoint_url is None
    env = trial_env(
        assignment,
        agent_id="a",
        checkpoint_path=checkpoint_dir(assignment, tmp_path),
        proxies={},
        in_container=True,
    )
    assert "AWS_ENDPOINT_URL_S3" not in env and "CORRAL_CHECKPOINT_ENDPOINT_URL" not in env


@pytest.mark.parametrize("url", ["minio:9000", "s3://x", "ftp://h"])
def test_an_endpoint_that_is_not_an_http_url_is_refused_at_its_path(url: str) -> None:
    body = {
        "entrypoint": "x",
        "checkpoint_storage": {"type": "s3", "bucket": "b", "endpoint_url": url},
    }
    with pytest.raises(ConfigError) as caught:
        validate(ExperimentConfig, body)
    assert [p.path for p in caught.value.problems] == ["checkpoint_storage.endpoint_url"]
