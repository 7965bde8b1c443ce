"""The real Lambda handlers against moto (in-process), fed real-shaped events.

``corral`` is a deployed Corral in miniature: the DynamoDB tables from ``dynamo_schema``, the
three queues as the template declares them (schedule FIFO, scale-up and interruptions
standard), a subnet and an AMI in moto's EC2, and a Context built by the real composition
(``context_from_env``) with a fake clock. ``build_context`` is monkeypatched to return it, so
the handlers run exactly as in Lambda, minus the container. ``deliver`` plays the event
source mapping: it takes what is on a queue and hands it to the handler as one SQS batch
(the tests check ``batchItemFailures`` themselves).

The Context gets boto3 clients of its own (``Corral.aws``), apart from the ones the tests
inspect moto with, so a test can hook exactly the calls the handlers make
(``fail_run_instances``, ``calls``) without its own calls tripping the hooks.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from moto import mock_aws

from corral.adapters.aws import clients
from corral.adapters.aws.dynamo_schema import create_tables
from corral.adapters.memory import FakeClock
from corral.domain.config import ExperimentConfig
from corral.domain.instance import Instance
from corral.handlers.aws import composition, scale_up, schedule, spot_reconcile
from corral.ports.queue import QueueName
from corral.protocol.agent import GpuInfo, Identity, IdentityKind, RegisterRequest
from corral.services import agents
from corral.services.kill import kill_experiment
from corral.services.shared.service_context import Context
from corral.services.submit import Submitted, submit_experiment
from tests import lambda_events
from tests.lambda_events import SPOT_WARNING, LambdaContext, ec2_event, function_arn
from tests.moto_env import GPU_POOL_YAML_HEAD, HANDLER_ENV, REGION, use_moto_env

PREFIX = "corral-ft-"
TAG_KEY, TAG_VALUE = "managed-by", "corral-functional"
POOL = "gpu"
MAX_IDLE_S = 60.0

CLUSTER_YAML = (
    GPU_POOL_YAML_HEAD
    + """\
      instance_type: g5.xlarge
      spot: false
      network_interface:
        subnet_id: {subnet}
      tag_key: {tag_key}
      tag_value: {tag_value}
      max_instances: 4
      max_idle_agent_period: 60s
      max_agent_starting_period: 5m
"""
)

MOTO_ENV = HANDLER_ENV
EVENT_TIME = "2025-01-01T00:00:00Z"


@dataclass
class FakeLambdaContext(LambdaContext):
    function_name: str = "corral-functional"
    invoked_function_arn: str = function_arn("corral-functional")


def sqs_record(queue_arn: str, body: str, message_id: str | None = None) -> dict[str, Any]:
    """One record of a Lambda SQS event, as the event source mapping delivers it."""
    return lambda_events.sqs_record(
        queue_arn, body, message_id or str(uuid.uuid4()), sent_ms=str(int(time.time() * 1000))
    )


def scheduled_event(rule: str = "corral-timer") -> dict[str, Any]:
    return lambda_events.scheduled_event(rule, EVENT_TIME)


def spot_warning(instance_id: str) -> dict[str, Any]:
    return ec2_event(SPOT_WARNING, instance_id, EVENT_TIME, **{"instance-action": "terminate"})


class _Refused:
    """Enough of an HTTP response for botocore to raise the error a hook returns."""

    status_code = 400
    headers: dict[str, str] = {}
    content = b""
    text = ""


def run_instances_offering(body: dict[str, Any]) -> tuple[str, str, str]:
    """(instance type, subnet, "spot" or "on-demand") of a RunInstances query body."""
    market = body.get("InstanceMarketOptions.MarketType")
    subnet = body.get("NetworkInterface.1.SubnetId") or body.get("SubnetId") or ""
    return str(body.get("InstanceType")), str(subnet), "spot" if market == "spot" else "on-demand"


@dataclass
class Corral:
    ctx: Context
    clock: FakeClock
    ec2: Any
    sqs: Any
    image: str
    subnet: str
    queue_urls: dict[QueueName, str]
    # The Context's own clients (dynamodb, ec2, sqs) and the environment it was built from.
    aws: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    # Every AWS operation the Context's clients made, by "service.Operation".
    calls: Counter[str] = field(default_factory=Counter)
    # (type, subnet, capacity) of each RunInstances call, in order, refused or not.
    launches: list[tuple[str, str, str]] = field(default_factory=list)

    # ---- the deployment ------------------------------------------------------------------
    def subnets(self) -> list[str]:
        """moto's default subnets, one per zone, the fixture's own first."""
        found = self.ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])[
            "Subnets"
        ]
        ids = [str(s["SubnetId"]) for s in sorted(found, key=lambda s: s["AvailabilityZone"])]
        return [self.subnet, *[i for i in ids if i != self.subnet]]

    def reconfigure(self, cluster_yaml: str) -> Context:
        """Rebuild the Context (same tables, queues, clients, clock) for another cluster
        config; the handlers use it from now on."""
        self.env[composition.CONFIG_ENV] = cluster_yaml
        self.ctx = composition.context_from_env(self.env, clock=self.clock, clients=self.aws)
        return self.ctx

    def fail_run_instances(
        self, code: str, when: Callable[[tuple[str, str, str]], bool] = lambda _: True
    ) -> None:
        """From now on, the Context's RunInstances calls for which ``when(offering)`` holds
        fail with ``code``, as EC2 answers them (botocore raises the ClientError)."""

        def refuse(params: dict[str, Any], **_: Any) -> Any:
            if not when(run_instances_offering(params.get("body") or {})):
                return None
            error = {"Code": code, "Message": f"{code} (injected by the test)"}
            return _Refused(), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}

        self.aws["ec2"].meta.events.register(
            "before-call.ec2.RunInstances", refuse, unique_id=f"refuse-{code}"
        )

    def stop_failing_run_instances(self, code: str) -> None:
        self.aws["ec2"].meta.events.unregister(
            "before-call.ec2.RunInstances", unique_id=f"refuse-{code}"
        )

    # ---- queues ------------------------------------------------------------------------
    def arn(self, queue: QueueName) -> str:
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_urls[queue], AttributeNames=["QueueArn"]
        )
        return str(attrs["Attributes"]["QueueArn"])

    def receive(self, queue: QueueName) -> list[dict[str, Any]]:
        """Every message now visible on ``queue``, deleted (as if handled), as SQS records."""
        records: list[dict[str, Any]] = []
        while True:
            reply = self.sqs.receive_message(
                QueueUrl=self.queue_urls[queue], MaxNumberOfMessages=10, VisibilityTimeout=0
            )
            messages = reply.get("Messages", [])
            if not messages:
                return records
            for m in messages:
                self.sqs.delete_message(
                    QueueUrl=self.queue_urls[queue], ReceiptHandle=m["ReceiptHandle"]
                )
                records.append(sqs_record(self.arn(queue), m["Body"], m["MessageId"]))

    def batch(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"Records": records}

    # ---- running the handlers ------------------------------------------------------------
    def handle(self, handler: Callable[..., Any], records: list[dict[str, Any]]) -> Any:
        """``handler`` on one SQS batch of ``records``, as the event source mapping runs it."""
        return handler(self.batch(records), FakeLambdaContext())

    def tick(self, handler: Callable[..., Any]) -> Any:
        """``handler`` on its timer's scheduled event."""
        return handler(scheduled_event(), FakeLambdaContext())

    def interruptions(self, *events: dict[str, Any]) -> Any:
        """``spot_reconcile`` on one batch of EventBridge ``events`` from the interruptions
        queue."""
        arn = self.arn(QueueName.INTERRUPTIONS)
        records = [sqs_record(arn, json.dumps(e)) for e in events]
        return self.handle(spot_reconcile.handler, records)

    def deliver(self, queue: QueueName, handler: Callable[..., Any]) -> dict[str, Any]:
        records = self.receive(queue)
        assert records, f"nothing on the {queue.value} queue"
        result: dict[str, Any] = self.handle(handler, records)
        return result

    # ---- EC2 -----------------------------------------------------------------------------
    def instances(self) -> dict[str, dict[str, Any]]:
        """Every EC2 instance, ours or not, by id."""
        found = {}
        for reservation in self.ec2.describe_instances()["Reservations"]:
            for instance in reservation["Instances"]:
                found[instance["InstanceId"]] = instance
        return found

    def state(self, cloud_id: str) -> str:
        return str(self.instances()[cloud_id]["State"]["Name"])

    def run_foreign(self, tags: dict[str, str] | None = None) -> str:
        extra: dict[str, Any] = {}
        if tags:
            pairs = [{"Key": k, "Value": v} for k, v in tags.items()]
            extra["TagSpecifications"] = [{"ResourceType": "instance", "Tags": pairs}]
        reply = self.ec2.run_instances(
            ImageId=self.image, InstanceType="m5.large", MinCount=1, MaxCount=1, **extra
        )
        return str(reply["Instances"][0]["InstanceId"])

    # ---- the user and the agent ------------------------------------------------------------
    def submit(self, slots: int = 1) -> Submitted:
        config = ExperimentConfig.model_validate(
            {"entrypoint": "python train.py", "resources": {"slots_per_trial": slots}}
        )
        return submit_experiment(self.ctx, config)

    def register(self, record: Instance) -> None:
        """The agent on ``record``'s instance registers (as the API would let it)."""
        assert record.cloud_id is not None
        request = RegisterRequest(
            cloud_id=record.cloud_id,
            record_id=record.id,
            identity=Identity(kind=IdentityKind.DEV, document="dev"),
            instance_type=record.offering.instance_type,
            zone=record.offering.location,
            private_ip="10.0.0.10",
            gpus=[
                GpuInfo(index=i, uuid=f"GPU-{i}", name="A10G", memory_mib=24_000)
                for i in range(record.slots)
            ],
        )
        agents.register(self.ctx, request, record.cloud_id)

    def agent(self, *, with_trial: bool) -> Instance:
        """Through the real handlers: an instance launched for a submitted 1-GPU trial, whose
        agent registered. With ``with_trial`` the next schedule pass makes it BUSY with the
        trial; without, the experiment is killed before the agent registers, so it comes up
        IDLE."""
        submitted = self.submit(slots=1)
        self.deliver(QueueName.SCHEDULE, schedule.handler)
        self.deliver(QueueName.SCALE_UP, scale_up.handler)
        (record,) = self.ctx.store.instances()
        if not with_trial:
            kill_experiment(self.ctx, submitted.experiment.id)
        self.register(record)
        if with_trial:
            self.deliver(QueueName.SCHEDULE, schedule.handler)  # registration woke it
        else:
            self.receive(QueueName.SCHEDULE)  # nothing to place: drop the wake-ups
        stored = self.ctx.store.get_instance(record.id)
        assert stored is not None
        return stored


@pytest.fixture
def corral(monkeypatch: pytest.MonkeyPatch) -> Iterator[Corral]:
    use_moto_env(monkeypatch, MOTO_ENV)
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        create_tables(boto3.client("dynamodb", region_name=REGION), PREFIX)
        subnet = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])[
            "Subnets"
        ][0]["SubnetId"]
        image = ec2.register_image(Name="corral-agent", RootDeviceName="/dev/sda1")["ImageId"]
        urls = {
            QueueName.SCHEDULE: sqs.create_queue(
                QueueName="corral-ft-schedule.fifo", Attributes={"FifoQueue": "true"}
            )["QueueUrl"],
            QueueName.SCALE_UP: sqs.create_queue(QueueName="corral-ft-scale-up")["QueueUrl"],
            QueueName.INTERRUPTIONS: sqs.create_queue(QueueName="corral-ft-interruptions")[
                "QueueUrl"
            ],
        }
        env = {
            composition.CONFIG_ENV: CLUSTER_YAML.format(
                image=image, subnet=subnet, tag_key=TAG_KEY, tag_value=TAG_VALUE
            ),
            composition.TABLE_PREFIX_ENV: PREFIX,
            composition.TAG_KEY_ENV: TAG_KEY,
            composition.TAG_VALUE_ENV: TAG_VALUE,
            "CORRAL_SCHEDULE_QUEUE_URL": urls[QueueName.SCHEDULE],
            "CORRAL_SCALE_UP_QUEUE_URL": urls[QueueName.SCALE_UP],
            "CORRAL_API_URL": "https://api.corral.test",  # as the template sets it
        }
        # Real time as the start: moto stamps LaunchTime with the wall clock, and the
        # reconciler compares it with the Context's clock.
        clock = FakeClock(start=time.time())
        # The Context's clients as deployed ones are made: over the trimmed service models.
        aws = {
            name: clients.client(name, region_name=REGION) for name in ("dynamodb", "ec2", "sqs")
        }
        ctx = composition.context_from_env(env, clock=clock, clients=aws)
        corral = Corral(ctx, clock, ec2, sqs, image, subnet, urls, aws=aws, env=env)
        _count_calls(corral)
        # Through the Corral, so that reconfigure() reaches the handlers too.
        monkeypatch.setattr(composition, "build_context", lambda: corral.ctx)
        yield corral


def _count_calls(corral: Corral) -> None:
    """Count every call of the Context's clients. ``before-parameter-build`` comes before
    ``before-call``, so refused calls are counted too."""

    def count(model: Any, params: dict[str, Any], **_: Any) -> None:
        service = model.service_model.endpoint_prefix
        corral.calls[f"{service}.{model.name}"] += 1
        if model.name == "RunInstances":
            nics = params.get("NetworkInterfaces") or [{}]
            market = (params.get("InstanceMarketOptions") or {}).get("MarketType")
            corral.launches.append(
                (
                    str(params.get("InstanceType")),
                    str(nics[0].get("SubnetId") or params.get("SubnetId") or ""),
                    "spot" if market == "spot" else "on-demand",
                )
            )

    for client in corral.aws.values():
        client.meta.events.register("before-parameter-build", count, unique_id="count-calls")


def body(event: dict[str, Any]) -> str:
    return json.dumps(event)
