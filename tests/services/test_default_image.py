"""Which image a trial runs in is decided at submission and stored with the experiment: its
own (Determined's ``{cpu, gpu}`` map picked by whether its trials have GPUs), else its pool's
``task_container_defaults.image``, else Corral's default. A trial never reaches a Docker agent
without one (it would fail at launch, exit 125, after an instance was bought)."""

from __future__ import annotations

import pytest

from corral.domain.config import load_cluster_config
from corral.domain.images import DEFAULT_IMAGE_GPU
from corral.services.shared.assignment_spec import build_assignment

from .harness import Cluster

POOLS = """
task_container_defaults:
  image: {cpu: "cluster/cpu:1", gpu: "cluster/gpu:1"}
resource_pools:
  - name: gpu
    provider: {type: aws, region: us-east-1, image_id: ami-0123456789abcdef0,
               instance_type: [g5.xlarge, c5.xlarge], cpu_slots_allowed: true,
               iam_instance_profile_arn: "arn:aws:iam::123456789012:instance-profile/a"}
  - name: cpu
    provider: {type: aws, region: us-east-1, image_id: ami-0123456789abcdef0,
               instance_type: c5.xlarge, cpu_slots_allowed: true,
               iam_instance_profile_arn: "arn:aws:iam::123456789012:instance-profile/a"}
  - name: own
    task_container_defaults: {image: "pool/own:2"}
    provider: {type: aws, region: us-east-1, image_id: ami-0123456789abcdef0,
               instance_type: g5.xlarge,
               iam_instance_profile_arn: "arn:aws:iam::123456789012:instance-profile/a"}
"""


def _cluster() -> Cluster:
    config = load_cluster_config(POOLS).config
    return Cluster(*config.resource_pools)  # type: ignore[arg-type]


def test_a_trial_without_image_gets_corrals_default() -> None:
    cluster = Cluster()  # a pool with no task_container_defaults
    submitted = cluster.submit()
    assert submitted.experiment.config["image"] == DEFAULT_IMAGE_GPU
    assert submitted.experiment.config["environment"]["image"] is None


@pytest.mark.parametrize(
    ("config", "image"),
    [
        ({}, "cluster/gpu:1"),  # the cluster's block, GPU trials
        ({"resources": {"slots_per_trial": 0}}, "cluster/cpu:1"),  # ...and CPU trials
        ({"resources": {"resource_pool": "own"}}, "pool/own:2"),  # the pool's block wins
        ({"resources": {"resource_pool": "cpu"}}, "cluster/cpu:1"),  # a CPU slot is no GPU
        (
            {"image": {"cpu": "c:1", "gpu": "g:1"}, "resources": {"resource_pool": "cpu"}},
            "c:1",
        ),
        ({"image": "mine:3"}, "mine:3"),  # the experiment's own wins
        ({"image": {"cpu": "c:1"}}, "cluster/gpu:1"),  # a map's missing entry: the default's
        ({"image": {"cpu": "c:1", "gpu": "g:1"}}, "g:1"),  # Determined's map
        (
            {
                "environment": {"image": {"cpu": "c:1", "cuda": "g:2"}},
                "resources": {"slots_per_trial": 0},
            },
            "c:1",
        ),
    ],
)
def test_the_stored_image_is_the_one_that_runs(config: dict[str, object], image: str) -> None:
    cluster = _cluster()
    submitted = cluster.submit(**config)
    assert submitted.experiment.config["image"] == image
    stored = cluster.store.get_experiment(submitted.experiment.id)
    assert stored is not None and stored.config["image"] == image


def test_a_map_image_is_refused_without_either_entry() -> None:
    from corral.domain.config import ConfigError, ExperimentConfig, validate

    with pytest.raises(ConfigError) as caught:
        validate(ExperimentConfig, {"entrypoint": "x", "image": {"rocm": "r"}})
    assert [p.path for p in caught.value.problems] == ["image"]
    assert "must name an image for cpu, gpu or both" in str(caught.value)


def test_the_assignment_names_the_stored_image() -> None:
    cluster = Cluster()
    trial_id = cluster.submit().trials[0].id
    for _ in range(120):  # an instance boots, its agent registers, the trial is placed
        cluster.step()
        trial = cluster.store.get_trial(trial_id)
        if trial is not None and trial.placement is not None:
            break
    assert trial is not None and trial.placement is not None
    agent_id = trial.placement.parts[0][0]
    assignment = build_assignment(cluster.ctx, trial, agent_id)
    assert assignment is not None and assignment.image == DEFAULT_IMAGE_GPU
