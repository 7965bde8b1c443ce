"""The agent protocol over HTTP: register, heartbeat with assignments, status, logs; and an
agent may only act as the instance it proved it is."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.services.harness import Cluster

from .conftest import USER, ApiClient
from .events import agent_arn

AgentFactory = Callable[[], tuple[str, str]]


def _assigned(api: ApiClient, cluster: Cluster, agent: AgentFactory) -> tuple[str, str, dict]:
    cloud_id, agent_id = agent()
    cluster.pump()  # the registration woke the scheduler: the trial is assigned
    reply = api.post(f"/agents/{agent_id}/heartbeat", {}, caller=agent_arn(cloud_id))
    assert reply.status == 200, reply.text
    (start,) = reply.json["start"]
    return cloud_id, agent_id, start


def test_register_and_heartbeat_round_trip_gives_assignments(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id, start = _assigned(api, cluster, running_agent)

    assert start["entrypoint"] == ["sh", "-c", "python train.py"]  # a string runs in a shell
    assert start["gpus"] == [0]
    assert start["checkpoint"]["storage_uri"].endswith(start["trial_id"])
    agents = api.get("/agents").json["instances"]
    (view,) = agents
    assert (view["id"], view["cloud_id"], view["state"]) == (agent_id, cloud_id, "BUSY")
    assert view["trials"] == [start["trial_id"]]
    assert view["last_heartbeat_at"] is not None
    assert view["capacity_type"] == "spot"
    assert view["cost_usd"] > 0
    assert api.get("/instances").json == api.get("/agents").json


def test_status_running_then_exit_completes_the_trial(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id, start = _assigned(api, cluster, running_agent)
    trial_id = start["trial_id"]
    path = f"/agents/{agent_id}/trials/{trial_id}/status"
    me = agent_arn(cloud_id)

    running = api.post(path, {"trial_id": trial_id, "state": "running"}, caller=me)
    assert running.json == {"applied": True, "trial_state": "RUNNING"}
    cluster.clock.advance(600)
    assert api.get(f"/trials/{trial_id}").json["cost_usd"] > 0  # priced while running

    done = api.post(path, {"trial_id": trial_id, "state": "exited", "exit_code": 0}, caller=me)
    assert done.json["trial_state"] == "COMPLETED"
    trial = api.get(f"/trials/{trial_id}").json
    assert trial["state"] == "COMPLETED" and trial["exit_code"] == 0
    assert trial["pending_reason"] is None
    assert trial["gpu_hours"] > 0.16
    exp = api.get(f"/experiments/{start['experiment_id']}").json
    assert exp["state"] == "COMPLETED"
    assert api.get("/agents").json["instances"][0]["idle_s"] == 0.0


def test_status_path_and_body_must_name_the_same_trial(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id, start = _assigned(api, cluster, running_agent)
    reply = api.post(
        f"/agents/{agent_id}/trials/{start['trial_id']}/status",
        {"trial_id": "other", "state": "running"},
        caller=agent_arn(cloud_id),
    )
    assert reply.status == 422
    assert reply.json["errors"][0]["field"] == "trial_id"


def test_logs_are_appended_and_paged(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id, start = _assigned(api, cluster, running_agent)
    trial_id = start["trial_id"]
    lines = [{"seq": n, "at": 1.0 + n, "line": f"step {n}"} for n in range(5)]
    path = f"/agents/{agent_id}/trials/{trial_id}/logs"
    reply = api.post(path, {"lines": lines}, caller=agent_arn(cloud_id))
    assert reply.json == {"accepted": 5}
    api.post(path, {"lines": lines[:2]}, caller=agent_arn(cloud_id))  # a resend: no duplicates

    first = api.get(f"/trials/{trial_id}/logs", query={"limit": 3}).json
    assert [x["line"] for x in first["lines"]] == ["step 0", "step 1", "step 2"]
    assert first["has_more"] is True and first["trial_done"] is False
    rest = api.get(
        f"/trials/{trial_id}/logs", query={"after_seq": first["next_after_seq"], "limit": 3}
    ).json
    assert [x["seq"] for x in rest["lines"]] == [3, 4]
    assert rest["has_more"] is False
    empty = api.get(f"/trials/{trial_id}/logs", query={"after_seq": 4}).json
    assert empty["lines"] == [] and empty["next_after_seq"] == 4


def test_an_agent_may_not_act_as_another_instance(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id, start = _assigned(api, cluster, running_agent)
    intruder = agent_arn("i-0000000000000dead")
    trial_id = start["trial_id"]
    status = {"trial_id": trial_id, "state": "exited", "exit_code": 1}

    for path, body in [
        (f"/agents/{agent_id}/heartbeat", {}),
        (f"/agents/{agent_id}/trials/{trial_id}/status", status),
        (f"/agents/{agent_id}/trials/{trial_id}/logs", {"lines": []}),
    ]:
        reply = api.post(path, body, caller=intruder)
        assert reply.status == 403, (path, reply.text)
    # Registering with someone else's instance id, proven as another instance.
    hijack = api.register(cloud_id)
    hijack_as_intruder = api.post(
        "/agents/register", json.loads(_register_body(cloud_id)), caller=intruder
    )
    assert hijack.status == 200  # the real one, again: fine
    assert hijack_as_intruder.status == 403
    assert cluster.store.get_trial(trial_id).state.value == "ASSIGNED"  # type: ignore[union-attr]


def test_an_agent_may_only_touch_trials_placed_on_it(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id, _ = _assigned(api, cluster, running_agent)
    other = api.post("/experiments", {"config": {"entrypoint": "x"}}).json["trials"][0]["id"]
    me = agent_arn(cloud_id)
    status = api.post(
        f"/agents/{agent_id}/trials/{other}/status",
        {"trial_id": other, "state": "exited", "exit_code": 0},
        caller=me,
    )
    logs = api.post(f"/agents/{agent_id}/trials/{other}/logs", {"lines": []}, caller=me)
    assert (status.status, logs.status) == (403, 403)
    assert cluster.store.get_trial(other).state.value == "PENDING"  # type: ignore[union-attr]


def test_users_may_not_call_agent_routes_and_agents_may_not_call_user_routes(
    api: ApiClient, cluster: Cluster, running_agent: AgentFactory
) -> None:
    cloud_id, agent_id = running_agent()
    assert api.post(f"/agents/{agent_id}/heartbeat", {}, caller=USER).status == 403
    assert api.post("/agents/register", json.loads(_register_body(cloud_id))).status == 403
    me = agent_arn(cloud_id)
    for method, path in [
        ("GET", "/experiments"),
        ("GET", "/agents"),
        ("GET", "/pools"),
        ("GET", "/events"),
    ]:
        assert api.call(method, path, caller=me).status == 403, path
    killed = api.post("/experiments", {"config": {"entrypoint": "x"}}, caller=me)
    assert killed.status == 403
    assert killed.json == {"message": "this route is for users, not agents"}


def test_unsigned_requests_are_401(api: ApiClient) -> None:
    assert api.get("/experiments", caller=None).status == 401
    assert api.post("/agents/register", {}, caller=None).status in (401, 422)
    assert api.get("/healthz", caller=None).status == 200


def test_the_agent_role_with_a_session_that_is_no_instance_is_refused(api: ApiClient) -> None:
    reply = api.get("/experiments", caller=agent_arn("laptop-session"))
    assert reply.status == 403


def test_an_identity_document_for_another_instance_is_refused(
    api: ApiClient, cluster: Cluster
) -> None:
    api.post("/experiments", {"config": {"entrypoint": "x"}})
    cluster.pump()
    cluster.clock.advance(60)
    (cloud_id,) = cluster.running_cloud_ids()
    document = json.dumps({"instanceId": "i-0000000000000beef"})
    reply = api.register(cloud_id, identity={"kind": "ec2", "document": document})
    assert reply.status == 403
    assert "i-0000000000000beef" in reply.json["message"]
    assert cluster.store.instance_by_cloud_id(cloud_id).state.value == "ALLOCATED"  # type: ignore[union-attr]


def test_registering_an_unknown_instance_is_404(api: ApiClient) -> None:
    reply = api.register("i-00000000000000abc")
    assert reply.status == 404


def _register_body(cloud_id: str) -> str:
    return json.dumps(
        {
            "cloud_id": cloud_id,
            "identity": {"kind": "ec2", "document": json.dumps({"instanceId": cloud_id})},
            "instance_type": "g.1",
            "zone": "zone-a",
            "gpus": [{"index": 0, "uuid": "GPU-0", "name": "fake", "memory_mib": 1}],
        }
    )
