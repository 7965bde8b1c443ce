"""Identity settings that would leave a pool's agents unable to register or to reach each
other: filled from the deployment where it knows them, else named (a warning, or a problem),
in ``corral config validate`` and in a deployed function's cold-start config check."""

from __future__ import annotations

import logging

import pytest
from config_helpers import aws_pool, cluster_problems, dump, gcp_pool

from corral.domain.config import (
    AwsProvider,
    GcpProvider,
    defaults_from_env,
    load_cluster_config,
)
from corral.handlers.config_source import parse_cluster_config

PROFILE = "arn:aws:iam::123456789012:instance-profile/corral-agent"
AGENT_SA = "corral-agent@my-project-1.iam.gserviceaccount.com"
AWS_DEPLOYMENT = {
    "CORRAL_AGENT_INSTANCE_PROFILE_ARN": PROFILE,
    "CORRAL_AGENT_METRICS_NAMESPACE": "Corral/Agents",
}
GCP_DEPLOYMENT = {
    "CORRAL_AGENT_SERVICE_ACCOUNT": AGENT_SA,
    "CORRAL_AGENT_NETWORK_TAG": "corral-agent",
}
AT = "resource_pools[0].provider"


def _load(pool: dict[str, object], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return load_cluster_config(dump({"resource_pools": [pool]}), defaults_from_env(env or {}))


# ---- AWS: the instance profile, the metrics namespace ---------------------------------------
def test_aws_pool_without_profile_is_named_when_the_deployment_knows_none() -> None:
    loaded = _load(aws_pool())
    assert loaded.warnings == (
        f"{AT}.iam_instance_profile_arn: not set, and the deployment names none "
        "(CORRAL_AGENT_INSTANCE_PROFILE_ARN, --instance-profile): the agents get no AWS "
        "credentials, cannot sign their requests to the API and never register",
    )


def test_aws_pool_without_profile_gets_the_stacks_profile_and_namespace() -> None:
    loaded = _load(aws_pool(), AWS_DEPLOYMENT)
    provider = loaded.config.default_pool.provider
    assert isinstance(provider, AwsProvider)
    assert provider.iam_instance_profile_arn == PROFILE
    assert provider.agent_settings.cloudwatch_metrics_namespace == "Corral/Agents"
    assert loaded.warnings == (
        f"{AT}.iam_instance_profile_arn: not set; using {PROFILE!r}, the deployment's agent "
        "instance profile (CORRAL_AGENT_INSTANCE_PROFILE_ARN)",
        f"{AT}.agent_settings.cloudwatch_metrics_namespace: not set; using 'Corral/Agents', the "
        "namespace the stack lets the agents put metrics in (CORRAL_AGENT_METRICS_NAMESPACE)",
    )


def test_a_pools_own_profile_and_namespace_win() -> None:
    own = "arn:aws:iam::123456789012:instance-profile/mine"
    loaded = _load(
        aws_pool(
            iam_instance_profile_arn=own, agent_settings={"cloudwatch_metrics_namespace": "X"}
        ),
        AWS_DEPLOYMENT,
    )
    provider = loaded.config.default_pool.provider
    assert isinstance(provider, AwsProvider)
    assert provider.iam_instance_profile_arn == own
    assert provider.agent_settings.cloudwatch_metrics_namespace == "X"
    assert loaded.warnings == ()


@pytest.mark.parametrize("key", ["team/owner", "cost center", "..", "_index"])
def test_tag_keys_ec2_refuses_with_metadata_tags_are_refused(key: str) -> None:
    problems = cluster_problems(
        {"resource_pools": [aws_pool(custom_tags=[{"key": key, "value": "x"}], tag_key=key)]}
    )
    rule = "EC2 allows only letters, digits and + - = . , _ : @ in the tag keys of instances"
    assert [p.split(":")[0] for p in problems] == [f"{AT}.tag_key", f"{AT}.custom_tags[0].key"]
    assert all(rule in p for p in problems)


def test_tag_keys_ec2_accepts_pass() -> None:
    loaded = _load(aws_pool(custom_tags=[{"key": "team:owner@corp=x,y+z.w-v_u", "value": "a/b c"}]))
    assert loaded.config.default_pool.name == "default"


# ---- GCP: the service account, the network tag ----------------------------------------------
def test_gcp_pool_gets_the_agent_account_and_firewall_tag_of_the_deployment() -> None:
    loaded = _load(gcp_pool(), GCP_DEPLOYMENT)
    provider = loaded.config.resource_pools[0].provider
    assert isinstance(provider, GcpProvider)
    assert provider.service_account.email == AGENT_SA
    assert provider.network_tags == ("corral-agent",)
    assert loaded.warnings == (
        f"{AT}.service_account.email: not set; using {AGENT_SA!r}, the deployment's agent "
        "service account (CORRAL_AGENT_SERVICE_ACCOUNT)",
        f"{AT}.network_tags: not set; using 'corral-agent', the tag the deployment's firewall "
        "rules target (CORRAL_AGENT_NETWORK_TAG)",
    )


def test_gcp_pool_on_the_default_account_without_tags_is_named() -> None:
    loaded = _load(gcp_pool(service_account={"email": ""}))
    paths = [w.split(":")[0] for w in loaded.warnings]
    assert paths == [f"{AT}.service_account.email", f"{AT}.network_tags"]
    assert "the API refuses agents" in loaded.warnings[0]
    assert "trials spanning instances hang" in loaded.warnings[1]


def test_gcp_tags_without_the_firewalls_tag_are_named() -> None:
    loaded = _load(
        gcp_pool(
            network_tags=["web"], service_account={"email": "other@p.iam.gserviceaccount.com"}
        ),
        GCP_DEPLOYMENT,
    )
    assert [w.split(":")[0] for w in loaded.warnings] == [
        f"{AT}.service_account.email",
        f"{AT}.network_tags",
    ]
    assert "without 'corral-agent'" in loaded.warnings[1]
    assert "CORRAL_AGENT_SERVICE_ACCOUNTS" in loaded.warnings[0]


def test_the_default_compute_account_named_outright_is_refused() -> None:
    problems = cluster_problems(
        {
            "resource_pools": [
                gcp_pool(
                    service_account={"email": "123456789-compute@developer.gserviceaccount.com"}
                )
            ]
        }
    )
    assert len(problems) == 1
    assert problems[0].startswith(
        f"{AT}.service_account.email: '123456789-compute@developer.gserviceaccount.com' is the "
        "project's default compute service account"
    )


# ---- at deploy: the functions' cold-start check says the same ----------------------------------
def test_cold_start_check_fills_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    text = dump({"resource_pools": [aws_pool()]})
    with caplog.at_level(logging.WARNING):
        config = parse_cluster_config(text, "SSM", {"AWS_REGION": "us-east-1", **AWS_DEPLOYMENT})
    provider = config.default_pool.provider
    assert isinstance(provider, AwsProvider) and provider.iam_instance_profile_arn == PROFILE
    with caplog.at_level(logging.WARNING):
        parse_cluster_config(text, "SSM", {"AWS_REGION": "us-east-1"})
    assert f"{AT}.iam_instance_profile_arn: not set, and the deployment names none" in caplog.text
