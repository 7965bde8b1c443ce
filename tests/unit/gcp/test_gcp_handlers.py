"""The Cloud Functions through functions-framework's test client, over memory adapters.

Each test loads ``corral/handlers/gcp/main.py`` as the runtime does (``create_app`` with the
source file) and injects the Context by replacing ``composition.build_context``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("functions_framework", reason="functions-framework not installed")

from functions_framework import create_app

import corral.handlers.gcp as handlers_package
from corral.domain.instance import InstanceState
from corral.handlers.gcp import composition
from corral.ports.queue import Message, QueueName
from tests.services.harness import Cluster

MAIN = str(Path(handlers_package.__file__).with_name("main.py"))
TOKEN = "user-token"
GRID = {
    "name": "grid",
    "entrypoint": ["python", "train.py"],
    "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.01]}},
    "searcher": {"name": "grid"},
}


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    made = Cluster()
    monkeypatch.setattr(composition, "build_context", lambda: made.ctx)
    monkeypatch.setenv("CORRAL_API_AUTH", "token")
    monkeypatch.setenv("CORRAL_USER_TOKEN", TOKEN)
    return made


def client(target: str, signature: str = "cloudevent") -> Any:
    return create_app(target, MAIN, signature).test_client()


def pubsub_event(payload: Any, attributes: dict[str, str] | None = None) -> dict[str, Any]:
    data = base64.b64encode(json.dumps(payload).encode()).decode()
    return {
        "message": {"data": data, "attributes": attributes or {}, "messageId": "m-1"},
        "subscription": "projects/p/subscriptions/s",
    }


def deliver(target: str, payload: Any, attributes: dict[str, str] | None = None) -> int:
    headers = {
        "ce-id": "evt-1",
        "ce-source": "//pubsub.googleapis.com/projects/p/topics/t",
        "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
        "ce-specversion": "1.0",
    }
    reply = client(target).post("/", json=pubsub_event(payload, attributes), headers=headers)
    return int(reply.status_code)


def launch_payload(message: Message) -> dict[str, Any]:
    return {"kind": message.kind, "body": message.body}


def test_api_serves_the_same_routes_behind_flask(cluster: Cluster) -> None:
    api = client("api", "http")
    assert api.get("/healthz").status_code == 200
    assert api.get("/experiments").status_code == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    created = api.post("/experiments", json={"config": GRID}, headers=auth)
    assert created.status_code == 201, created.get_data(as_text=True)
    listed = api.get("/experiments?limit=5", headers=auth)
    assert listed.status_code == 200
    assert len(cluster.store.trials()) == 2
    assert cluster.queue.sent(QueueName.SCHEDULE)  # the submit woke the scheduler


def test_schedule_then_scale_up_launches(cluster: Cluster) -> None:
    cluster.submit(name="one", resources={"slots_per_trial": 1})
    assert deliver("schedule", {"kind": "schedule", "body": {}}) == 200
    launches = cluster.queue.drain(QueueName.SCALE_UP)
    assert launches
    assert deliver("scale_up", launch_payload(launches[0])) == 200
    (instance,) = cluster.store.instances()
    assert instance.state is InstanceState.ALLOCATED and instance.cloud_id is not None
    # The same command again (Pub/Sub delivers at least once): nothing more happens.
    assert deliver("scale_up", launch_payload(launches[0])) == 200
    assert len(cluster.cloud.list_owned()) == 1


def test_an_early_delayed_command_fails_the_delivery_to_come_back(cluster: Cluster) -> None:
    cluster.submit(name="one", resources={"slots_per_trial": 1})
    deliver("schedule", {"kind": "schedule"})
    (launch, *_) = cluster.queue.drain(QueueName.SCALE_UP)
    later = {"not_before": repr(cluster.clock.now() + 60)}
    assert deliver("scale_up", launch_payload(launch), later) == 500
    assert cluster.store.instances()[0].state is InstanceState.QUEUED
    cluster.clock.advance(61)
    assert deliver("scale_up", launch_payload(launch), later) == 200
    assert cluster.store.instances()[0].state is InstanceState.ALLOCATED


@pytest.mark.parametrize(
    "payload",
    [
        [1],
        {"kind": "mystery", "body": {}},
        {"kind": "launch_instance"},
        {"kind": "launch_instance", "body": {"instance_id": "inst-1", "attempt": "0"}},
    ],
)
def test_commands_that_can_never_succeed_are_dropped(cluster: Cluster, payload: Any) -> None:
    assert deliver("scale_up", payload) == 200


def test_timers_run_their_passes(cluster: Cluster) -> None:
    assert deliver("idle_reap", {"kind": "idle_reap"}) == 200
    assert deliver("spot_reconcile", {"kind": "reconcile"}) == 200


def test_a_preemption_log_entry_drains_the_agent(cluster: Cluster) -> None:
    cluster.submit(name="one", resources={"slots_per_trial": 1})
    cluster.pump()
    cluster.step(60)
    live = [
        i for i in cluster.store.instances() if i.state in (InstanceState.IDLE, InstanceState.BUSY)
    ]
    assert live, "the harness should have brought an agent up"
    entry = {
        "protoPayload": {
            "methodName": "compute.instances.preempted",
            "resourceName": f"projects/p/zones/us-central1-a/instances/{live[0].cloud_id}",
        }
    }
    assert deliver("spot_reconcile", entry) == 200
    drained = cluster.store.get_instance(live[0].id)
    assert drained is not None and drained.interruption_notice_at is not None
    # Someone else's instance: acknowledged, nothing changes.
    entry["protoPayload"]["resourceName"] = "projects/p/zones/us-central1-a/instances/theirs"
    assert deliver("spot_reconcile", entry) == 200
