"""The deployment's trial role reaches agents in the register reply (docs/security.md,
"Trial credentials"): the agent assumes it for each trial it runs."""

from __future__ import annotations

from dataclasses import replace

from corral.services.agents import register

from .harness import Cluster, make_pool

ROLE = "arn:aws:iam::123456789012:role/corral-TrialRole-ABC"


def _register(cluster: Cluster) -> str | None:
    request = cluster.booted_instance_request()
    return register(cluster.ctx, request, request.cloud_id).trial_role_arn


def test_the_register_reply_names_the_deployments_trial_role() -> None:
    cluster = Cluster(make_pool())
    cluster.ctx = replace(cluster.ctx, trial_role_arn=ROLE)
    assert _register(cluster) == ROLE


def test_a_deployment_without_one_names_none() -> None:
    assert _register(Cluster(make_pool())) is None
