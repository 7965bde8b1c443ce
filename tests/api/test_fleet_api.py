"""Fleet views (agents, pools, events), the docs, and errors that must never be tracebacks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral.domain.records import Event, EventKind
from corral.services.shared.service_context import Context
from tests.services.harness import Cluster

from .conftest import ApiClient
from .events import http_event, user_arn


def test_pools_show_counts_offerings_backoff_breaker_and_budget(
    api: ApiClient, cluster: Cluster
) -> None:
    api.post("/experiments", {"config": {"entrypoint": "x"}})
    cluster.pump()
    now = cluster.clock.now()
    state = cluster.store.pool_state("gpu")
    cluster.store.commit(
        [
            replace(
                state,
                backoff_until=now + 300,
                backoff_failures=2,
                backoff_reason="VcpuLimitExceeded in us-east-1",
                capacity=state.capacity.marked_unavailable("g.1|zone-a|spot", now, 180),
            )
        ]
    )

    (pool,) = api.get("/pools").json["pools"]

    assert pool["name"] == "gpu" and pool["is_default"] is True
    assert pool["instances_by_state"]["ALLOCATED"] == 1
    assert pool["trials_pending"] == 1
    spot = next(o for o in pool["offerings"] if o["capacity_type"] == "spot")
    assert spot["available"] is False and spot["unavailable_until"] == now + 180
    assert pool["backoff"]["active"] is True
    assert pool["backoff"]["reason"] == "VcpuLimitExceeded in us-east-1"
    assert pool["blocked_reason"].startswith("waiting: VcpuLimitExceeded")
    assert pool["breaker"]["open"] is False
    assert pool["budget"]["budget_usd"] is None and pool["budget"]["exhausted"] is False
    assert pool["budget"]["hourly_burn_usd"] > 0


def test_agents_can_be_filtered_and_include_ended_records(api: ApiClient, cluster: Cluster) -> None:
    api.post("/experiments", {"config": {"entrypoint": "x"}})
    cluster.pump()
    assert len(api.get("/agents", query={"pool": "gpu"}).json["instances"]) == 1
    assert api.get("/agents", query={"pool": "other"}).json["instances"] == []
    api.post(f"/experiments/{api.get('/experiments').json['experiments'][0]['id']}/kill")
    cluster.pump()  # the launch is no longer needed: cancelled or terminated
    everything = api.get("/agents", query={"all": True}).json["instances"]
    assert len(everything) >= len(api.get("/agents").json["instances"])


def test_events_page_by_time_without_losing_events_that_share_a_timestamp(
    api: ApiClient, cluster: Cluster
) -> None:
    at = cluster.clock.now()
    cluster.store.append_events(
        [Event(at, EventKind.LAUNCH_PLANNED, f"e{n}", pool="gpu") for n in range(3)]
        + [Event(at + 1, EventKind.LAUNCH_PLANNED, f"e{n}", pool="gpu") for n in range(3, 5)]
        + [Event(at + 2, EventKind.LAUNCH_PLANNED, "other pool", pool="cpu")]
    )
    seen: list[str] = []
    since = 0.0
    for _ in range(10):
        page = api.get("/events", query={"since": since, "limit": 2, "pool": "gpu"}).json
        seen += [e["message"] for e in page["events"]]
        since = page["next_since"]
        if not page["has_more"]:
            break
    assert seen == ["e0", "e1", "e2", "e3", "e4"]
    assert api.get("/events", query={"since": at + 1}).json["events"][0]["pool"] == "cpu"


def test_bad_query_parameters_name_the_parameter(api: ApiClient) -> None:
    reply = api.get("/events", query={"limit": 0})
    assert reply.status == 422
    assert reply.json["errors"][0]["field"] == "limit"
    assert api.get("/trials/t/logs", query={"after_seq": "x"}).json["errors"][0]["field"] == (
        "after_seq"
    )


@pytest.mark.parametrize("since", ["nan", "inf", "1e400", "-infinity"])
def test_a_time_that_is_not_finite_is_a_422(api: ApiClient, since: str) -> None:
    # It was answered 200 with "next_since": NaN, which is not JSON.
    reply = api.get("/events", query={"since": since})
    assert reply.status == 422, reply.text
    assert reply.json["errors"][0]["field"] == "since"


def test_openapi_lists_the_routes_and_docs_serve_html(api: ApiClient) -> None:
    reply = api.get("/openapi.json", caller=None)
    assert reply.status == 200
    doc = reply.json
    assert doc["openapi"].startswith("3.1")
    paths = doc["paths"]
    for path, method in [
        ("/experiments", "post"),
        ("/experiments", "get"),
        ("/experiments/{experiment_id}", "get"),
        ("/experiments/{experiment_id}/kill", "post"),
        ("/experiments/{experiment_id}/trials", "get"),
        ("/trials/{trial_id}", "get"),
        ("/trials/{trial_id}/logs", "get"),
        ("/commands", "post"),
        ("/agents", "get"),
        ("/instances", "get"),
        ("/pools", "get"),
        ("/events", "get"),
        ("/healthz", "get"),
        ("/agents/register", "post"),
        ("/agents/{agent_id}/heartbeat", "post"),
        ("/agents/{agent_id}/trials/{trial_id}/status", "post"),
        ("/agents/{agent_id}/trials/{trial_id}/logs", "post"),
    ]:
        assert method in paths.get(path, {}), (method, path)
    assert "422" in paths["/experiments"]["post"]["responses"]
    docs = api.get("/docs", caller=None)
    assert docs.status == 200
    assert docs.headers["content-type"].startswith("text/html")
    assert "swagger" in docs.text.lower()


def test_unknown_routes_and_crashes_answer_json_without_a_traceback(cluster: Cluster) -> None:
    def broken() -> Context:
        raise RuntimeError("secret detail from deep inside")

    from corral.api.app import build_resolver
    from corral.api.auth import IamAuthenticator

    resolver = build_resolver(broken, IamAuthenticator("corral-agent"))
    crash = resolver.resolve(http_event("GET", "/pools", iam_arn=user_arn()), None)
    assert crash["statusCode"] == 500
    assert "secret detail" not in crash["body"] and "Traceback" not in crash["body"]
    assert "internal error (request id" in crash["body"]
    missing = resolver.resolve(http_event("GET", "/nowhere", iam_arn=user_arn()), None)
    assert missing["statusCode"] == 404
    assert '"message":"no route GET /nowhere"' in missing["body"]


def test_healthz_needs_no_context(cluster: Cluster) -> None:
    from corral.api.app import build_resolver
    from corral.api.auth import IamAuthenticator

    def never() -> Context:
        raise AssertionError("healthz must not build the Context")

    resolver = build_resolver(never, IamAuthenticator("corral-agent"))
    reply = resolver.resolve(http_event("GET", "/healthz"), None)
    assert reply["statusCode"] == 200
    assert '"status":"ok"' in reply["body"]
