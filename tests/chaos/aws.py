"""The deployment in miniature: moto's DynamoDB, SQS and EC2 in-process, the tables and
queues of the template, and a Context built by the real composition with the soak's clock.

moto is made to behave like EC2 where the soak depends on it: ``RunInstances`` honours
``ClientToken`` (a repeated token returns the instance the first call made, as EC2 does;
moto would launch another), and instances carry ``LaunchTime`` on the soak's clock. The
Context's EC2 client makes one attempt per call (botocore's own retries would sleep in real
time and hide the throttling errors the soak injects from Corral's handling of them).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from unittest import mock

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from moto import mock_aws

from corral.adapters.aws.dynamo_schema import create_tables
from corral.adapters.memory import FakeClock
from corral.handlers.aws import api, composition
from corral.ports.queue import QueueName
from corral.services.shared.service_context import Context, SequentialIds
from tests.moto_env import GPU_POOL_YAML_HEAD, HANDLER_ENV, REGION

PREFIX = "corral-chaos-"
TAG_KEY, TAG_VALUE = "managed-by", "corral-chaos"
POOL = "gpu"
START = 1_767_225_600.0  # 2026-01-01T00:00:00Z: a fixed start keeps runs repeatable
USER_TOKEN = "chaos-user-token"
AGENT_SECRET = "chaos-agent-secret"
EC2_ERRORS = (
    "InsufficientInstanceCapacity",
    "RequestLimitExceeded",
    "VcpuLimitExceeded",
    "Unsupported",
)

CLUSTER_YAML = (
    GPU_POOL_YAML_HEAD
    + """\
      instance_type: [g5.xlarge, g5.12xlarge]
      spot: true
      on_demand_fallback: true
      network_interface:
        subnet_id: {subnet}
      tag_key: {tag_key}
      tag_value: {tag_value}
      min_instances: 0
      max_instances: {max_instances}
      max_idle_agent_period: {idle_s}s
      max_agent_starting_period: 5m
      launch_error_retries: 3
      capacity_memory_period: 3m
"""
)

ENV = HANDLER_ENV | {
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_DEV": "false",
    "POWERTOOLS_LOG_LEVEL": "CRITICAL",
    "CORRAL_API_AUTH": "token",
    "CORRAL_USER_TOKEN": USER_TOKEN,
    "CORRAL_AGENT_TOKEN_SECRET": AGENT_SECRET,
}


# DynamoDB item operations whose reply moto's generic, shape-walking serializer makes the
# soak's bottleneck (three quarters of its time); their result is plain JSON already.
_FAST_DYNAMO = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    }
)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.timestamp()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _fast_dynamo_reply(original: Callable[..., Any]) -> Callable[..., Any]:
    def execute_result(self: Any, context: Any) -> Any:
        if context.operation_model.name not in _FAST_DYNAMO or isinstance(self.result, Exception):
            return original(self, context)
        body = json.dumps(self.result, default=_json_default)
        return 200, {"Content-Type": "application/x-amz-json-1.0"}, body

    return execute_result


class _Reply:
    """Enough of an HTTP response for botocore to take a hook's answer as EC2's."""

    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}
        self.content = b""
        self.text = ""


@dataclass
class Launches:
    """Every RunInstances call the Context made: tokens, the instances they produced."""

    by_token: dict[str, list[str]] = field(default_factory=dict)
    replies: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    calls: int = 0


@dataclass
class World:
    ctx: Context
    clock: FakeClock
    ec2: Any  # the soak's own clients, never hooked
    sqs: Any
    image: str
    subnet: str
    queue_urls: dict[QueueName, str]
    aws: dict[str, Any]  # the Context's clients
    launches: Launches = field(default_factory=Launches)
    ec2_error_rate: float = 0.0
    rng: random.Random = field(default_factory=random.Random)

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every EC2 instance, ours or not, by id."""
        found: dict[str, dict[str, Any]] = {}
        for page in self.ec2.get_paginator("describe_instances").paginate():
            for reservation in page["Reservations"]:
                for instance in reservation["Instances"]:
                    found[instance["InstanceId"]] = instance
        return found

    def run_foreign(self, tags: dict[str, str]) -> str:
        pairs = [{"Key": k, "Value": v} for k, v in tags.items()]
        reply = self.ec2.run_instances(
            ImageId=self.image,
            InstanceType="g5.xlarge",
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[{"ResourceType": "instance", "Tags": pairs}],
        )
        return str(reply["Instances"][0]["InstanceId"])

    def terminate(self, cloud_id: str) -> None:
        with contextlib.suppress(Exception):
            self.ec2.terminate_instances(InstanceIds=[cloud_id])

    # ---- hooks on the Context's EC2 client --------------------------------------------
    def _before_run(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> Any:
        body = params.get("body") or {}
        token = str(body.get("ClientToken") or "")
        context["chaos_token"] = token
        self.launches.calls += 1
        if self.ec2_error_rate and self.rng.random() < self.ec2_error_rate:
            code = self.rng.choice(EC2_ERRORS)
            self.launches.errors[code] = self.launches.errors.get(code, 0) + 1
            error = {"Code": code, "Message": f"{code} (injected by the chaos soak)"}
            status = 503 if code == "RequestLimitExceeded" else 400
            return _Reply(status), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}}
        if token and token in self.launches.replies:  # EC2: same token, same instance
            return _Reply(200), copy.deepcopy(self.launches.replies[token])
        return None

    def _after_run(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        token = str(context.get("chaos_token") or "")
        instances = parsed.get("Instances") or []
        if not token or not instances or token in self.launches.replies:
            return
        self.launches.replies[token] = copy.deepcopy(parsed)
        self.launches.by_token.setdefault(token, []).extend(i["InstanceId"] for i in instances)

    def install_hooks(self) -> None:
        events = self.aws["ec2"].meta.events
        events.register("before-call.ec2.RunInstances", self._before_run, unique_id="chaos-run")
        events.register("after-call.ec2.RunInstances", self._after_run, unique_id="chaos-ran")


@contextlib.contextmanager
def world(seed: int, max_instances: int, idle_s: float) -> Iterator[World]:
    """Everything is torn down on exit: moto's state, the environment, the patches."""
    clock = FakeClock(start=START)

    def now() -> datetime:
        return datetime.fromtimestamp(clock.now(), UTC).replace(tzinfo=None)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, ENV))
        os.environ.pop("AWS_ENDPOINT_URL", None)
        stack.enter_context(mock_aws())
        stack.enter_context(mock.patch("moto.ec2.models.instances.utcnow", now))
        from moto.dynamodb.responses import DynamoResult

        fast = _fast_dynamo_reply(DynamoResult.execute_result)
        stack.enter_context(mock.patch.object(DynamoResult, "execute_result", fast))
        from moto.moto_api._internal import mock_random

        mock_random.seed(seed)
        yield _build(stack, clock, seed, max_instances, idle_s)


def _build(
    stack: contextlib.ExitStack, clock: FakeClock, seed: int, max_instances: int, idle_s: float
) -> World:
    ec2 = boto3.client("ec2", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    create_tables(boto3.client("dynamodb", region_name=REGION), PREFIX)
    subnets = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])
    subnet = sorted(s["SubnetId"] for s in subnets["Subnets"])[0]
    image = ec2.register_image(Name="corral-agent", RootDeviceName="/dev/sda1")["ImageId"]
    urls = {
        QueueName.SCHEDULE: sqs.create_queue(
            QueueName=f"{PREFIX}schedule.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"],
        QueueName.SCALE_UP: sqs.create_queue(QueueName=f"{PREFIX}scale-up")["QueueUrl"],
        QueueName.INTERRUPTIONS: sqs.create_queue(QueueName=f"{PREFIX}interruptions")["QueueUrl"],
    }
    env = {
        composition.CONFIG_ENV: CLUSTER_YAML.format(
            image=image,
            subnet=subnet,
            tag_key=TAG_KEY,
            tag_value=TAG_VALUE,
            max_instances=max_instances,
            idle_s=int(idle_s),
        ),
        composition.TABLE_PREFIX_ENV: PREFIX,
        composition.TAG_KEY_ENV: TAG_KEY,
        composition.TAG_VALUE_ENV: TAG_VALUE,
        "CORRAL_SCHEDULE_QUEUE_URL": urls[QueueName.SCHEDULE],
        "CORRAL_SCALE_UP_QUEUE_URL": urls[QueueName.SCALE_UP],
        "CORRAL_INTERRUPTIONS_QUEUE_URL": urls[QueueName.INTERRUPTIONS],
        "CORRAL_API_URL": "https://api.corral.test",
    }
    once = Config(retries={"total_max_attempts": 1})
    aws = {
        "dynamodb": boto3.client("dynamodb", region_name=REGION),
        "ec2": boto3.client("ec2", region_name=REGION, config=once),
        "sqs": boto3.client("sqs", region_name=REGION),
    }
    ctx = composition.context_from_env(env, clock=clock, clients=aws)
    ctx.ids = SequentialIds()
    ctx.rng = random.Random(seed)
    w = World(ctx, clock, ec2, sqs, image, subnet, urls, aws, rng=random.Random(seed * 7 + 1))
    w.install_hooks()
    # The handlers build their Context through this function: they get the soak's.
    stack.enter_context(mock.patch.object(composition, "build_context", lambda: w.ctx))
    api.resolver.cache_clear()  # the API reads its authenticator from the environment
    stack.callback(api.resolver.cache_clear)
    return w
