"""The settings that decide whether a pool's agents can prove who they are and reach each other.

A pool can be valid field by field and still launch instances that never register: an AWS
pool without an instance profile (its agents have no credentials to sign their requests with),
a GCP pool on the project's default compute service account (deploy.sh lets scale_up attach
only ``corral-agent``, and the API accepts only the agents' accounts), GCP network tags without
the tag the firewall rules target (gang trials cannot reach each other and hang). What the
deployment made (the stack's instance profile and metrics namespace, deploy.sh's service account
and firewall tag: ``deployment.py``) fills the pools that leave them out, with a warning as the
other deployment defaults; the rest is warned about, naming the path. Refusals (the default
compute account named outright, tag keys EC2 refuses) are field rules of the provider models.

Works on the provider mapping before validation, like ``deployment.fill_defaults``, so both
``corral config validate`` and the functions' cold-start config check say it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.domain.config.deployment import DeploymentDefaults, DeploymentValue

PROFILE_FIELD = "iam_instance_profile_arn"
NAMESPACE_FIELD = "cloudwatch_metrics_namespace"


def _filled(path: str, value: DeploymentValue, what: str) -> str:
    return f"{path}: not set; using {value.value!r}, {what} ({value.source})"


def check_identity(provider: dict[str, Any], path: str, defaults: DeploymentDefaults) -> list[str]:
    """Fill the identity settings of ``provider`` (a mutable provider mapping) the deployment
    knows; a warning for each value filled and each setting that leaves agents unreachable."""
    kind = provider.get("type")
    if kind == "aws":
        return _aws(provider, path, defaults)
    if kind == "gcp":
        return _gcp(provider, path, defaults)
    return []


def _aws(provider: dict[str, Any], path: str, defaults: DeploymentDefaults) -> list[str]:
    warnings: list[str] = []
    at = f"{path}.{PROFILE_FIELD}"
    profile = defaults.aws_instance_profile
    if PROFILE_FIELD not in provider:
        if profile is not None:
            provider[PROFILE_FIELD] = profile.value
            warnings.append(_filled(at, profile, "the deployment's agent instance profile"))
        else:
            warnings.append(
                f"{at}: not set, and the deployment names none (CORRAL_AGENT_INSTANCE_PROFILE_ARN, "
                "--instance-profile): the agents get no AWS credentials, cannot sign their "
                "requests to the API and never register"
            )
    namespace = defaults.aws_metrics_namespace
    settings = provider.get("agent_settings", {})
    if namespace is not None and isinstance(settings, Mapping) and NAMESPACE_FIELD not in settings:
        provider["agent_settings"] = {**settings, NAMESPACE_FIELD: namespace.value}
        warnings.append(
            _filled(
                f"{path}.agent_settings.{NAMESPACE_FIELD}",
                namespace,
                "the namespace the stack lets the agents put metrics in",
            )
        )
    return warnings


def _gcp(provider: dict[str, Any], path: str, defaults: DeploymentDefaults) -> list[str]:
    warnings: list[str] = []
    account = defaults.gcp_service_account
    block = provider.get("service_account", {})
    if isinstance(block, Mapping) and not block.get("email"):
        at = f"{path}.service_account.email"
        if account is not None:
            provider["service_account"] = {**block, "email": account.value}
            warnings.append(_filled(at, account, "the deployment's agent service account"))
        else:
            warnings.append(
                f"{at}: not set, so the project's default compute service account, and the "
                "deployment names no agent account (CORRAL_AGENT_SERVICE_ACCOUNT, "
                "--service-account): deploy.sh lets scale_up attach only corral-agent, and "
                "the API refuses agents of any account it was not given"
            )
    elif isinstance(block, Mapping) and account is not None and block["email"] != account.value:
        warnings.append(
            f"{path}.service_account.email: {block['email']!r} is not the deployment's agent "
            f"account {account.value!r} ({account.source}): scale_up needs "
            "iam.serviceAccountUser on it and the API must list it in "
            "CORRAL_AGENT_SERVICE_ACCOUNTS, or its agents never register"
        )
    tag = defaults.gcp_network_tag
    tags = provider.get("network_tags")
    at = f"{path}.network_tags"
    if tags is None or tags == []:
        if tag is not None:
            provider["network_tags"] = [tag.value]
            warnings.append(_filled(at, tag, "the tag the deployment's firewall rules target"))
        else:
            warnings.append(
                f"{at}: not set: the instances carry no network tag, so no firewall rule of "
                "infra/gcp/firewall.sh (tag corral-agent) reaches them and trials spanning "
                "instances hang; add the firewall's tag (or CORRAL_AGENT_NETWORK_TAG, "
                "--network-tag)"
            )
    elif tag is not None and (
        (isinstance(tags, list) and tag.value not in tags)
        or (isinstance(tags, str) and tags != tag.value)
    ):
        warnings.append(
            f"{at}: without {tag.value!r}, the tag the deployment's firewall rules target "
            f"({tag.source}): trials spanning instances cannot reach each other and hang"
        )
    return warnings
