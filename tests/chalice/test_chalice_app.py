"""The Chalice app (``infra/chalice/app.py``) through ``chalice.test.Client``, over a Context on
the in-memory adapters (the services' ``Cluster``): the wrappers must reach the same SAM
handlers with events those handlers accept.

``chalice.test.Client`` runs the app with the stage's environment from
``.chalice/config.json`` (so the api handler builds its ``IamAuthenticator`` from the real
config). Chalice's local gateway accepts every request on an ``IAMAuthorizer`` route and
fills no identity; ``signed_as`` plays API Gateway's part: the ARN in the test's
``x-test-caller-arn`` header becomes ``requestContext.identity.userArn``, as a SigV4-signed
request's caller does on a REST API.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from chalice.local import LambdaContext, LocalGatewayAuthorizer
from chalice.test import Client

from corral.adapters.aws.sqs_queue import encode_body
from corral.domain.instance import InstanceState
from corral.handlers.aws import api, composition
from corral.ports.queue import QueueName
from tests.api.events import user_arn
from tests.services.harness import Cluster, make_pool

PROJECT = Path(__file__).resolve().parents[2] / "infra" / "chalice"
CALLER_HEADER = "x-test-caller-arn"
GRID = {
    "entrypoint": "python train.py",
    "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.01]}},
    "searcher": {"name": "grid"},
}
ONE_TRIAL = {"entrypoint": "python train.py"}


def _load_app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("corral_chalice_app", PROJECT / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


chalice_app = _load_app()
pytestmark = pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode")


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    cluster = Cluster(make_pool(max_instances=2))
    monkeypatch.setattr(composition, "build_context", lambda: cluster.ctx)
    api.resolver.cache_clear()  # built once per container: this test's env and Context
    yield cluster
    api.resolver.cache_clear()


@pytest.fixture
def signed_as(monkeypatch: pytest.MonkeyPatch) -> None:
    original = LocalGatewayAuthorizer.authorize

    def authorize(self: Any, raw_path: str, event: dict[str, Any], context: Any) -> Any:
        arn = (event.get("headers") or {}).get(CALLER_HEADER)
        if arn:
            event["requestContext"]["identity"]["userArn"] = arn
        return original(self, raw_path, event, context)

    monkeypatch.setattr(LocalGatewayAuthorizer, "authorize", authorize)


@pytest.fixture
def client(cluster: Cluster, signed_as: None) -> Iterator[Client]:
    with Client(chalice_app.app, stage_name="dev", project_dir=str(PROJECT)) as client:
        yield client


def _post_json(client: Client, path: str, body: Any, caller: str | None) -> Any:
    headers = {"content-type": "application/json"}
    if caller:
        headers[CALLER_HEADER] = caller
    return client.http.post(path, headers=headers, body=json.dumps(body).encode())


def _sqs(client: Client, cluster: Cluster, queue: QueueName) -> dict[str, Any]:
    bodies = [encode_body(m) for m in cluster.queue.sent(queue)]
    assert bodies, f"nothing was sent to the {queue.value} queue"
    return client.events.generate_sqs_event(message_bodies=bodies, queue_name=queue.value)


def _submit(client: Client, config: dict[str, Any] = GRID) -> dict[str, Any]:
    reply = _post_json(client, "/experiments", {"config": config}, user_arn())
    assert reply.status_code == 201, reply.body
    return dict(reply.json_body)


# ---- API ---------------------------------------------------------------------------------
def test_post_experiments_through_the_rest_route_writes_pending_trials(
    client: Client, cluster: Cluster
) -> None:
    body = _submit(client)
    assert [t["state"] for t in body["trials"]] == ["PENDING", "PENDING"]
    stored = cluster.store.trials(experiment_id=body["id"])
    assert sorted(t.state.value for t in stored) == ["PENDING", "PENDING"]
    assert cluster.queue.sent(QueueName.SCHEDULE), "the submit wakes the scheduler"
    # Query strings reach the resolver too.
    listed = client.http.get("/experiments?limit=5", headers={CALLER_HEADER: user_arn()})
    assert listed.status_code == 200, listed.body
    assert [e["id"] for e in listed.json_body["experiments"]] == [body["id"]]


def test_a_request_without_an_iam_identity_is_refused(client: Client, cluster: Cluster) -> None:
    reply = _post_json(client, "/experiments", {"config": GRID}, caller=None)
    assert reply.status_code in (401, 403), reply.body
    assert cluster.store.experiments(limit=10) == []


def test_a_deep_path_from_api_gateway_reaches_the_resolver(client: Client) -> None:
    """A REST API (v1) event as API Gateway sends it through ``/{proxy+}``, given to the
    Lambda entry point (Chalice's local gateway cannot route a greedy path of several
    segments, so this bypasses it)."""
    path = "/experiments/no-such-id"
    event = {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": "GET",
        "headers": {"accept": "application/json"},
        "multiValueQueryStringParameters": None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": "GET",
            "path": f"/api{path}",
            "stage": "api",
            "accountId": "123456789012",
            "apiId": "abc123",
            "identity": {"sourceIp": "203.0.113.7", "userArn": user_arn()},
        },
        "body": None,
        "isBase64Encoded": False,
    }
    os.environ.update(CORRAL_API_AUTH="iam", CORRAL_AGENT_ROLE_NAME="corral-agent")
    try:
        reply = chalice_app.app(event, LambdaContext("api_handler", memory_size=512))
    finally:
        for key in ("CORRAL_API_AUTH", "CORRAL_AGENT_ROLE_NAME"):
            os.environ.pop(key, None)
    assert reply["statusCode"] == 404, reply
    assert "no-such-id" in reply["body"]


# ---- queues and timers -------------------------------------------------------------------
def test_schedule_then_scale_up_messages_launch_an_instance(
    client: Client, cluster: Cluster
) -> None:
    _submit(client, ONE_TRIAL)
    scheduled = client.lambda_.invoke("schedule_queue", _sqs(client, cluster, QueueName.SCHEDULE))
    assert scheduled.payload == {"batchItemFailures": []}
    planned = cluster.store.instances()
    assert [i.state for i in planned] == [InstanceState.QUEUED]

    launched = client.lambda_.invoke("scale_up_queue", _sqs(client, cluster, QueueName.SCALE_UP))

    assert launched.payload == {"batchItemFailures": []}
    (record,) = cluster.store.instances()
    # Launched: the simulated cloud grants on-demand capacity at once.
    assert record.state in {InstanceState.REQUESTED, InstanceState.ALLOCATED}
    assert record.cloud_id is not None
    assert cluster.cloud.get(record.cloud_id) is not None


def test_a_failed_record_fails_the_whole_batch_unless_item_failures_are_reported(
    client: Client, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = client.events.generate_sqs_event(message_bodies=["not json"], queue_name="scale-up")
    # config.json says "false": returning batchItemFailures would lose the record, so it raises.
    with pytest.raises(chalice_app.BatchFailedError, match="whole batch is redelivered"):
        client.lambda_.invoke("scale_up_queue", event)

    # As after --merge-template added ReportBatchItemFailures: the list goes back to Lambda.
    # (Called without the test client, which would apply config.json's "false" again.)
    monkeypatch.setenv(chalice_app.REPORTS_ITEM_FAILURES_ENV, "true")
    handler = chalice_app.app.handler_map["scale_up_queue"]
    reply = handler(event, LambdaContext("scale_up_queue", memory_size=512))
    assert reply == {"batchItemFailures": [{"itemIdentifier": "message-id"}]}


def test_scheduled_event_runs_a_reconcile_pass(client: Client, cluster: Cluster) -> None:
    _submit(client, ONE_TRIAL)
    client.lambda_.invoke("schedule_queue", _sqs(client, cluster, QueueName.SCHEDULE))
    client.lambda_.invoke("scale_up_queue", _sqs(client, cluster, QueueName.SCALE_UP))
    (record,) = cluster.store.instances()
    assert record.cloud_id is not None
    cluster.cloud.terminate([record.cloud_id])  # gone behind Corral's back
    cluster.clock.advance(600)

    tick = client.events.generate_cw_event(
        source="aws.events", detail_type="Scheduled Event", detail={}, resources=[]
    )
    reply = client.lambda_.invoke("spot_reconcile_timer", tick)

    assert reply.payload["applied"], reply.payload
    (after,) = cluster.store.instances()
    assert after.state not in {InstanceState.REQUESTED, InstanceState.ALLOCATED}, after


def test_timers_run_the_schedule_and_idle_reap_handlers(client: Client, cluster: Cluster) -> None:
    tick = client.events.generate_cw_event(
        source="aws.events", detail_type="Scheduled Event", detail={}, resources=[]
    )
    assert client.lambda_.invoke("schedule_timer", tick).payload == {"batchItemFailures": []}
    reaped = client.lambda_.invoke("idle_reap_timer", tick).payload
    assert reaped == {"drained": [], "undrained": [], "terminated": [], "stopped": [], "lost": []}


# ---- packaging ---------------------------------------------------------------------------
def test_chalice_package_writes_a_sam_template_offline(tmp_path: Path) -> None:
    chalice = Path(sys.executable).with_name("chalice")
    if not chalice.exists():
        pytest.skip("the chalice command is not installed next to this interpreter")
    before = _files(PROJECT)
    # Packaged from a copy: chalice writes its deployment zip (several MB) into the
    # project's .chalice/deployments/, which must not be the repository's.
    project = tmp_path / "corral"
    project.mkdir()
    shutil.copy(PROJECT / "app.py", project / "app.py")
    shutil.copytree(PROJECT / ".chalice", project / ".chalice")
    # The dependencies would come from the package index, which this test does not reach;
    # the template is what is checked here, not the bundle.
    (project / "requirements.txt").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") or k == "AWS_REGION"} | {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    out = tmp_path / "out"
    done = subprocess.run(
        [str(chalice), "package", "--stage", "dev", str(out)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0 and any(
        word in done.stderr for word in ("ConnectionError", "Could not connect", "network")
    ):
        pytest.skip(f"chalice package needs the network here: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr
    template = json.loads((out / "sam.json").read_text())
    resources = template["Resources"]
    functions = {
        name: r for name, r in resources.items() if r["Type"] == "AWS::Serverless::Function"
    }
    assert {"APIHandler", "ScheduleQueue", "ScaleUpQueue", "SpotReconcileTimer"} <= set(functions)
    assert resources["RestAPI"]["Type"] == "AWS::Serverless::Api"  # REST (v1), not HttpApi
    assert functions["ScaleUpQueue"]["Properties"]["Role"].endswith("ScaleUpRole-REPLACE_ME")
    sqs = functions["ScaleUpQueue"]["Properties"]["Events"]
    (event,) = sqs.values()
    assert event["Type"] == "SQS"
    assert "FunctionResponseTypes" not in event["Properties"]  # hence BatchFailedError
    assert _files(PROJECT) == before  # nothing left in the repository


def _files(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*")}
