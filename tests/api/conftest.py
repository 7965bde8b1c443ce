"""The API under test: the real resolver, fed HTTP API v2 events, over a Context on the
in-memory adapters (the same Cluster the service tests use, so time and agents are ours)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from corral.api.app import build_resolver
from corral.api.auth import Authenticator, IamAuthenticator
from corral.ports.queue import QueueName
from tests.services.harness import Cluster, make_pool

from .events import ACCOUNT, AGENT_ROLE, agent_arn, http_event, user_arn

USER = user_arn()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)


class ApiClient:
    def __init__(self, cluster: Cluster, auth: Authenticator | None = None) -> None:
        self.cluster = cluster
        self.resolver = build_resolver(
            lambda: cluster.ctx, auth or IamAuthenticator(AGENT_ROLE, ACCOUNT)
        )

    def call(self, method: str, path: str, *, caller: str | None = USER, **kwargs: Any) -> Reply:
        event = http_event(method, path, iam_arn=caller, **kwargs)
        result = self.resolver.resolve(event, None)
        headers = {k.lower(): str(v) for k, v in (result.get("headers") or {}).items()}
        return Reply(int(result["statusCode"]), headers, result.get("body") or "")

    def get(self, path: str, **kwargs: Any) -> Reply:
        return self.call("GET", path, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Reply:
        return self.call("POST", path, body=body if body is not None else {}, **kwargs)

    # ---- agents over HTTP -----------------------------------------------------------------
    def register(self, cloud_id: str, gpus: int = 1, **extra: Any) -> Reply:
        known = self.cluster.cloud.get(cloud_id) is not None
        record_id = self.cluster.cloud.tags(cloud_id).get("corral-record") if known else None
        body = {
            "cloud_id": cloud_id,
            "record_id": record_id,
            "identity": {"kind": "ec2", "document": json.dumps({"instanceId": cloud_id})},
            "instance_type": "g.1",
            "zone": "zone-a",
            "private_ip": "10.0.0.5",
            "gpus": [
                {"index": i, "uuid": f"GPU-{i}", "name": "fake", "memory_mib": 1024}
                for i in range(gpus)
            ],
            **extra,
        }
        return self.post("/agents/register", body, caller=agent_arn(cloud_id))


def snapshot(cluster: Cluster) -> tuple[Any, ...]:
    """Everything a request could write: records, pool states, events, queued messages, and
    the observations (heartbeats, log lines, metric points) of every instance and trial."""
    store = cluster.store
    trials = sorted(store.trials(), key=lambda t: t.id)
    instances = sorted(store.instances(), key=lambda i: i.id)
    trial_ids = [t.id for t in trials]
    return (
        store.experiments(limit=10_000),
        trials,
        instances,
        [store.pool_state(name) for name in cluster.ctx.pools],
        store.events(limit=100_000),
        [cluster.queue.sent(q) for q in QueueName],
        store.heartbeats([i.id for i in instances]),
        {t: store.logs(t, limit=100_000) for t in trial_ids},
        sorted(store.metric_summaries(trial_ids), key=repr),
    )


@pytest.fixture
def cluster() -> Cluster:
    return Cluster(make_pool(max_instances=2))


@pytest.fixture
def api(cluster: Cluster) -> ApiClient:
    return ApiClient(cluster)


@pytest.fixture
def running_agent(api: ApiClient, cluster: Cluster) -> Callable[[], tuple[str, str]]:
    """Submit one experiment and boot the instance it plans; returns (cloud id, agent id)."""

    def make() -> tuple[str, str]:
        reply = api.post("/experiments", {"config": {"entrypoint": "python train.py"}})
        assert reply.status == 201, reply.text
        cluster.pump()
        cluster.clock.advance(60)
        (cloud_id,) = cluster.running_cloud_ids()
        registered = api.register(cloud_id)
        assert registered.status == 200, registered.text
        return cloud_id, registered.json["agent_id"]

    return make
