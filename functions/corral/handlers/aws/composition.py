"""The one place the Lambda functions wire adapters to services: ``build_context()``.

Built once per container, on the first invocation, then cached: importing a handler costs
no boto3 import, no SSM call and no config parsing, so cold starts stay short and a bad
config fails the invocation with a clear message in the logs instead of an import error.

Environment (set by ``infra/template.yaml``):

``CORRAL_CLUSTER_CONFIG``
    The cluster config itself, YAML or JSON text. Wins when set. Used by the local stack
    and tests; fine for small configs, but Lambda caps a function's whole environment at
    4 KB, so the template does not deploy this way.
``CORRAL_CLUSTER_CONFIG_PARAMETER``
    The name of an SSM parameter holding that text (read once per container, decrypted if
    it is a SecureString). The template always sets this: it either creates the parameter
    from its ``ClusterConfig`` parameter or points at one you manage, so a config can grow
    to SSM's 8 KB and a config change reaches new containers without a code deploy.
``CORRAL_TABLE_PREFIX``
    DynamoDB table-name prefix (``dynamo_schema.table_name``).
``CORRAL_SCHEDULE_QUEUE_URL``, ``CORRAL_SCALE_UP_QUEUE_URL``, ``CORRAL_INTERRUPTIONS_QUEUE_URL``
    The queues this function may send to; a function is only given the ones its role
    allows (an unset one fails loudly if a service ever sends there).
``CORRAL_TAG_KEY``, ``CORRAL_TAG_VALUE``
    The ownership pair the IAM policies are conditioned on. Optional; when set, every pool
    must use exactly this pair (one that does not could never launch or terminate, so it
    is refused at start rather than failing later with UnauthorizedOperation).
``CORRAL_ADMINS``
    Admins added to the cluster config's ``admins`` (comma-separated principal names or
    patterns). Optional; the local stack sets it to its default user.
``CORRAL_TRIAL_ROLE_ARN``
    The stack's TrialRole, told to agents at registration (they assume it once per trial).
    Optional; unset, trials get no AWS credentials from their agents.
``AWS_REGION``
    Set by Lambda: the region of the table, the queues and the SSM parameter. Pools name
    their own EC2 region.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from corral.domain.access import admins_with
from corral.domain.config import ClusterConfig
from corral.handlers.config_source import CompositionError, check_pools, parse_cluster_config
from corral.ports.clock import Clock, SystemClock
from corral.ports.queue import QueueName
from corral.services.shared.service_context import Context

CONFIG_ENV = "CORRAL_CLUSTER_CONFIG"
CONFIG_PARAMETER_ENV = "CORRAL_CLUSTER_CONFIG_PARAMETER"
TABLE_PREFIX_ENV = "CORRAL_TABLE_PREFIX"
TAG_KEY_ENV = "CORRAL_TAG_KEY"
TAG_VALUE_ENV = "CORRAL_TAG_VALUE"
ADMINS_ENV = "CORRAL_ADMINS"
TRIAL_ROLE_ENV = "CORRAL_TRIAL_ROLE_ARN"
# The deployment's agent settings (a JSON object merged into every launch's agent config).
AGENT_SETTINGS_ENV = "CORRAL_AGENT_SETTINGS"
QUEUE_URL_ENV: Mapping[QueueName, str] = {
    QueueName.SCHEDULE: "CORRAL_SCHEDULE_QUEUE_URL",
    QueueName.SCALE_UP: "CORRAL_SCALE_UP_QUEUE_URL",
    QueueName.INTERRUPTIONS: "CORRAL_INTERRUPTIONS_QUEUE_URL",
}

# Reads an SSM parameter's value by name; replaced in tests.
ParameterReader = Callable[[str], str]


@functools.cache
def build_context() -> Context:
    """The container's Context, built on first use from ``os.environ`` and then reused.

    ``functools.cache`` does not cache exceptions: a failed build (SSM throttled, say) is
    retried on the next invocation. Tests replace this function (monkeypatch) with one that
    returns a Context they built with ``context_from_env`` and a fake clock.
    """
    return context_from_env(os.environ)


def context_from_env(
    env: Mapping[str, str],
    *,
    clock: Clock | None = None,
    read_parameter: ParameterReader | None = None,
    clients: Mapping[str, Any] | None = None,
) -> Context:
    """A Context wired to DynamoDB, EC2 and SQS as ``env`` describes.

    ``clients`` may hold ready boto3 clients under ``dynamodb``, ``ec2`` and ``sqs`` (the
    local stack points them at its endpoint); missing ones are created lazily by the adapters.
    """
    from corral.adapters.aws.dynamo_store import DynamoStore
    from corral.adapters.aws.ec2_provider import Ec2Provider
    from corral.adapters.aws.sqs_queue import SqsQueue

    clients = clients or {}
    clock = clock or SystemClock()
    config = cluster_config(env, read_parameter or _read_ssm_parameter)
    check_pools(
        config,
        "aws",
        (env.get(TAG_KEY_ENV), env.get(TAG_VALUE_ENV)),
        "pool {pool!r} tags its instances {owner}, but this deployment's IAM policies only "
        "allow {allowed} (stack TagKey/TagValue)",
    )
    queue_urls = {name: env[var] for name, var in QUEUE_URL_ENV.items() if env.get(var)}
    return Context(
        store=DynamoStore(clients.get("dynamodb"), prefix=env.get(TABLE_PREFIX_ENV)),
        cloud=Ec2Provider(
            config,
            client=clients.get("ec2"),
            clock=clock,
            api_url=env.get("CORRAL_API_URL"),
            agent_settings=agent_settings(env),
        ),
        queue=SqsQueue(queue_urls, client=clients.get("sqs")),
        clock=clock,
        pools={pool.name: pool for pool in config.resource_pools},
        default_pool=config.default_pool_name,
        admins=admins_with(config.admins, env.get(ADMINS_ENV, "")),
        trial_role_arn=env.get(TRIAL_ROLE_ENV) or None,
    )


def agent_settings(env: Mapping[str, str]) -> dict[str, object]:
    """``CORRAL_AGENT_SETTINGS``: a JSON object, or a CompositionError naming it."""
    text = env.get(AGENT_SETTINGS_ENV, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as error:
        raise CompositionError(f"{AGENT_SETTINGS_ENV}: not JSON: {error}") from error
    if not isinstance(value, dict):
        raise CompositionError(f"{AGENT_SETTINGS_ENV}: must be a JSON object of agent settings")
    return value


def cluster_config(env: Mapping[str, str], read_parameter: ParameterReader) -> ClusterConfig:
    """The validated cluster config from the inline text or the SSM parameter."""
    text = env.get(CONFIG_ENV, "").strip()
    source = CONFIG_ENV
    if not text:
        name = env.get(CONFIG_PARAMETER_ENV, "").strip()
        if not name:
            raise CompositionError(f"set {CONFIG_ENV} (the config) or {CONFIG_PARAMETER_ENV}")
        source = f"SSM parameter {name}"
        text = read_parameter(name)
    return parse_cluster_config(text, source, env)


def _read_ssm_parameter(name: str) -> str:
    from corral.adapters.aws import clients  # lazily: SSM costs only when read

    response = clients.client("ssm").get_parameter(Name=name, WithDecryption=True)
    return str(response["Parameter"]["Value"])


__all__ = ["CompositionError", "build_context", "cluster_config", "context_from_env"]
