"""Who may call what, route by route: users call no agent route, agents no user route, and an
agent acts only as the instance it proved, never as another one.

The routes come from the API's own OpenAPI document (and the resolver, for the few routes
left out of it), so a new route is tested the day it is added: an agent route without a
request below, or a route of a kind no rule covers, fails ``test_every_route_is_covered``.
Every refusal is a 403 with nothing written (``snapshot``: records, pool states, events,
queues, heartbeats, log lines, metric points).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from corral.api.auth_gcp import GcpAuthenticator
from tests.services.harness import Cluster, make_pool

from .conftest import USER, ApiClient, snapshot
from .events import agent_arn

# The resolver's routes that /openapi.json leaves out: the docs and the dashboard's files,
# public by design (they carry no data: see routes_dashboard).
UNDOCUMENTED_PUBLIC = {
    ("GET", "/"),
    ("GET", "/docs"),
    ("GET", "/openapi.json"),
    ("GET", "/dashboard/{name}"),
}
AGENT_TAG = "agents"


@dataclass(frozen=True)
class Agent:
    cloud_id: str
    agent_id: str
    trial_id: str
    experiment_id: str

    @property
    def caller(self) -> str:
        return agent_arn(self.cloud_id)


@dataclass(frozen=True)
class Fleet:
    api: ApiClient
    cluster: Cluster
    a: Agent
    b: Agent


def _boot(api: ApiClient, cluster: Cluster, known: set[str]) -> Agent:
    """Submit one experiment, boot the instance it plans, register it and take its trial."""
    created = api.post("/experiments", {"config": {"entrypoint": "python train.py"}})
    assert created.status == 201, created.text
    cluster.pump()
    cluster.clock.advance(60)
    (cloud_id,) = set(cluster.running_cloud_ids()) - known
    registered = api.register(cloud_id)
    assert registered.status == 200, registered.text
    agent_id = registered.json["agent_id"]
    cluster.pump()  # the registration woke the scheduler: the trial is assigned to it
    beat = api.post(f"/agents/{agent_id}/heartbeat", {}, caller=agent_arn(cloud_id))
    (start,) = beat.json["start"]
    return Agent(cloud_id, agent_id, start["trial_id"], created.json["id"])


@pytest.fixture
def fleet() -> Fleet:
    """Two agents, each running one trial of its own experiment (both submitted by USER)."""
    cluster = Cluster(make_pool(max_instances=2))
    api = ApiClient(cluster)
    a = _boot(api, cluster, set())
    b = _boot(api, cluster, {a.cloud_id})
    return Fleet(api, cluster, a, b)


# ---- the routes -------------------------------------------------------------------------------
def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    doc = ApiClient(Cluster(make_pool())).get("/openapi.json").json
    return [
        (method.upper(), path, operation)
        for path, operations in doc["paths"].items()
        for method, operation in operations.items()
    ]


OPERATIONS = _operations()
PUBLIC = [(m, p) for m, p, op in OPERATIONS if op.get("security") == []]
AGENT_ROUTES = [(m, p) for m, p, op in OPERATIONS if AGENT_TAG in op.get("tags", [])]
USER_ROUTES = [(m, p) for m, p, _ in OPERATIONS if (m, p) not in {*PUBLIC, *AGENT_ROUTES}]


def _register_body(cloud_id: str, document_for: str | None = None) -> dict[str, Any]:
    return {
        "cloud_id": cloud_id,
        "identity": {
            "kind": "ec2",
            "document": json.dumps({"instanceId": document_for or cloud_id}),
        },
        "instance_type": "g.1",
        "zone": "zone-a",
        "gpus": [{"index": 0, "uuid": "GPU-0", "name": "fake", "memory_mib": 1024}],
    }


def _exited(trial_id: str) -> dict[str, Any]:
    return {"trial_id": trial_id, "state": "exited", "exit_code": 0}


def _lines() -> dict[str, Any]:
    return {"lines": [{"seq": 0, "at": 1.0, "line": "written by an intruder"}]}


# What agent A would send on each agent route, as (path, body). Each runs as a user below, and
# as agent B (``INTRUSIONS``): both must be refused with nothing written.
OWN_REQUESTS: dict[tuple[str, str], Callable[[Agent], tuple[str, dict[str, Any]]]] = {
    ("POST", "/agents/register"): lambda a: ("/agents/register", _register_body(a.cloud_id)),
    ("POST", "/agents/{agent_id}/heartbeat"): lambda a: (
        f"/agents/{a.agent_id}/heartbeat",
        {"trials": [_exited(a.trial_id)], "draining": True},
    ),
    ("POST", "/agents/{agent_id}/trials/{trial_id}/status"): lambda a: (
        f"/agents/{a.agent_id}/trials/{a.trial_id}/status",
        _exited(a.trial_id),
    ),
    ("POST", "/agents/{agent_id}/trials/{trial_id}/logs"): lambda a: (
        f"/agents/{a.agent_id}/trials/{a.trial_id}/logs",
        _lines(),
    ),
}

# Agent B acting on A: every way one agent can name another's instance or trial.
INTRUSIONS: dict[tuple[str, str], list[Callable[[Agent, Agent], tuple[str, dict[str, Any]]]]] = {
    ("POST", "/agents/register"): [
        # B registers A's instance, with A's document or with its own.
        lambda a, b: ("/agents/register", _register_body(a.cloud_id)),
        lambda a, b: ("/agents/register", _register_body(a.cloud_id, document_for=b.cloud_id)),
        # B registers itself with a document naming A.
        lambda a, b: ("/agents/register", _register_body(b.cloud_id, document_for=a.cloud_id)),
    ],
    ("POST", "/agents/{agent_id}/heartbeat"): [
        lambda a, b: (f"/agents/{a.agent_id}/heartbeat", {"trials": [_exited(a.trial_id)]}),
    ],
    ("POST", "/agents/{agent_id}/trials/{trial_id}/status"): [
        lambda a, b: (f"/agents/{a.agent_id}/trials/{a.trial_id}/status", _exited(a.trial_id)),
        # Its own record, A's trial.
        lambda a, b: (f"/agents/{b.agent_id}/trials/{a.trial_id}/status", _exited(a.trial_id)),
    ],
    ("POST", "/agents/{agent_id}/trials/{trial_id}/logs"): [
        lambda a, b: (f"/agents/{a.agent_id}/trials/{a.trial_id}/logs", _lines()),
        lambda a, b: (f"/agents/{b.agent_id}/trials/{a.trial_id}/logs", _lines()),
    ],
}

# A valid body for every user route that takes one (a malformed body would be a 422 before
# the caller's kind is checked: docs/api.md, "Authentication").
USER_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/experiments"): {"config": {"entrypoint": "python train.py"}},
    ("POST", "/commands"): {"argv": ["true"]},
    ("POST", "/experiments/{experiment_id}/kill"): {},
    ("POST", "/pools/{name}/reset-breaker"): {},
}


def _user_path(path: str, fleet: Fleet) -> str:
    values = {
        "experiment_id": fleet.a.experiment_id,
        "trial_id": fleet.a.trial_id,
        "agent_id": fleet.a.agent_id,
        "name": "gpu",
    }
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    assert "{" not in path, f"no value for a parameter of {path}: add it above"
    return path


def _resolver_routes() -> set[tuple[str, str]]:
    # Powertools keeps its routes in these two lists; if a release renames them this fails
    # loudly rather than checking nothing.
    resolver = ApiClient(Cluster(make_pool())).resolver
    routes = [*resolver._static_routes, *resolver._dynamic_routes]
    return {(r.method, r.openapi_path) for r in routes}


def test_every_route_is_covered() -> None:
    documented = {(m, p) for m, p, _ in OPERATIONS}
    assert _resolver_routes() - documented == UNDOCUMENTED_PUBLIC
    assert set(OWN_REQUESTS) == set(AGENT_ROUTES) == set(INTRUSIONS), "an agent route is untested"
    assert PUBLIC == [("GET", "/healthz")]
    for method, path, operation in OPERATIONS:
        if (method, path) in USER_ROUTES and "requestBody" in operation:
            assert (method, path) in USER_BODIES, f"{method} {path}: add a valid body"
    # The kinds the tests below rely on are there (a wrong filter would empty a list).
    assert ("POST", "/experiments/{experiment_id}/kill") in USER_ROUTES
    assert ("POST", "/pools/{name}/reset-breaker") in USER_ROUTES
    assert len(AGENT_ROUTES) == 4 and len(USER_ROUTES) >= 15


def _refused(fleet: Fleet, method: str, path: str, caller: str, body: Any = None) -> Any:
    before = snapshot(fleet.cluster)
    reply = fleet.api.call(method, path, caller=caller, body=body)
    assert reply.status == 403, (method, path, reply.text)
    assert snapshot(fleet.cluster) == before, (method, path)
    return reply.json


@pytest.mark.parametrize(("method", "route"), AGENT_ROUTES)
def test_a_user_calls_no_agent_route(fleet: Fleet, method: str, route: str) -> None:
    path, body = OWN_REQUESTS[(method, route)](fleet.a)
    error = _refused(fleet, method, path, USER, body)
    assert error["message"] == "this route is for agents, not users"


@pytest.mark.parametrize(("method", "route"), USER_ROUTES)
def test_an_agent_calls_no_user_route(fleet: Fleet, method: str, route: str) -> None:
    body = USER_BODIES.get((method, route))
    error = _refused(fleet, method, _user_path(route, fleet), fleet.a.caller, body)
    assert error["message"] == "this route is for users, not agents"


@pytest.mark.parametrize(
    ("method", "route", "case"),
    [(m, r, n) for (m, r), cases in INTRUSIONS.items() for n in range(len(cases))],
)
def test_an_agent_acts_only_as_itself(fleet: Fleet, method: str, route: str, case: int) -> None:
    path, body = INTRUSIONS[(method, route)][case](fleet.a, fleet.b)
    error = _refused(fleet, method, path, fleet.b.caller, body)
    assert error["message"].strip(), error


@pytest.mark.parametrize(("method", "route"), AGENT_ROUTES)
def test_the_requests_refused_above_are_accepted_from_their_own_agent(
    fleet: Fleet, method: str, route: str
) -> None:
    # Otherwise a request refused for being malformed would pass the tests above. One per
    # fleet: the heartbeat's report ends A's trial, and an ended trial takes no more writes.
    path, body = OWN_REQUESTS[(method, route)](fleet.a)
    reply = fleet.api.call(method, path, caller=fleet.a.caller, body=body)
    assert reply.status == 200, (path, reply.text)


def test_a_heartbeat_cannot_move_or_measure_another_agents_trial(fleet: Fleet) -> None:
    # B's own record, but reporting A's trial as ended and sending metric points for it: the
    # heartbeat is answered, A's trial is untouched and no point is stored for it.
    trial_before = fleet.cluster.store.get_trial(fleet.a.trial_id)
    point = {"seq": 0, "kind": "validation", "batches": 1, "values": {"loss": 0.5}, "at": 1.0}
    reply = fleet.api.post(
        f"/agents/{fleet.b.agent_id}/heartbeat",
        {
            "trials": [_exited(fleet.a.trial_id)],
            "metrics": [{"trial_id": fleet.a.trial_id, "points": [point]}],
        },
        caller=fleet.b.caller,
    )
    assert reply.status == 200, reply.text
    assert fleet.cluster.store.get_trial(fleet.a.trial_id) == trial_before
    assert fleet.cluster.store.metric_summaries([fleet.a.trial_id]) == []


# ---- GCP identities ---------------------------------------------------------------------------
PROJECT = "proj-123"


def _gcp_claims(token: str, audience: str) -> dict[str, Any]:
    """The fake verifier: ``instance:<name>`` is that GCE instance, ``user:<email>`` a user."""
    kind, _, who = token.partition(":")
    if kind == "instance":
        engine = {"project_id": PROJECT, "instance_name": who, "zone": "zone-a"}
        return {"iss": "https://accounts.google.com", "google": {"compute_engine": engine}}
    return {"iss": "https://accounts.google.com", "email": who, "email_verified": True}


def test_on_gcp_the_owner_is_the_email_and_agents_act_only_as_themselves() -> None:
    cluster = Cluster(make_pool(max_instances=2))
    auth = GcpAuthenticator("https://api", ["alice@example.com"], [PROJECT], verify=_gcp_claims)
    api = ApiClient(cluster, auth)
    created = api.post(
        "/experiments",
        {"config": {"entrypoint": "x"}},
        caller=None,
        bearer="user:Alice@Example.com",
    )
    assert created.status == 201, created.text
    assert created.json["owner"] == "alice@example.com"  # Google's emails ignore case
    cluster.pump()
    cluster.clock.advance(60)
    (cloud_id,) = cluster.running_cloud_ids()
    body = {
        "cloud_id": cloud_id,
        "identity": {"kind": "gce", "document": f"instance:{cloud_id}"},
        "instance_type": "g.1",
        "zone": "zone-a",
        "gpus": [{"index": 0, "uuid": "GPU-0", "name": "fake", "memory_mib": 1024}],
    }
    before = snapshot(cluster)
    intruder = api.post("/agents/register", body, caller=None, bearer="instance:other-vm")
    assert intruder.status == 403 and snapshot(cluster) == before
    user = api.post("/agents/register", body, caller=None, bearer="user:alice@example.com")
    assert user.status == 403 and snapshot(cluster) == before
    own = api.post("/agents/register", body, caller=None, bearer=f"instance:{cloud_id}")
    assert own.status == 200, own.text
    agent_id = own.json["agent_id"]
    beat = api.post(f"/agents/{agent_id}/heartbeat", {}, caller=None, bearer="instance:other-vm")
    assert beat.status == 403
    listed = api.get("/experiments", caller=None, bearer=f"instance:{cloud_id}")
    assert listed.status == 403
