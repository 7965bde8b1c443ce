"""Users' work routes: submit, look, kill; invalid input is refused naming the field, and
nothing is written."""

from __future__ import annotations

from typing import Any

import pytest

from corral.ports.commands import CommandKind
from corral.ports.queue import QueueName
from tests.services.harness import Cluster

from .conftest import ApiClient, snapshot

GRID = {
    "name": "grid",
    "entrypoint": ["python", "train.py"],
    "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.01]}},
    "searcher": {"name": "grid"},
}


def test_submit_writes_pending_trials_and_wakes_the_scheduler(
    api: ApiClient, cluster: Cluster
) -> None:
    reply = api.post("/experiments", {"config": GRID})

    assert reply.status == 201, reply.text
    body = reply.json
    assert body["state"] == "ACTIVE"
    assert body["trial_count"] == 2
    assert body["trials_by_state"]["PENDING"] == 2
    assert body["owner"] == "arn:aws:iam::123456789012:user/alice"
    assert [t["state"] for t in body["trials"]] == ["PENDING", "PENDING"]
    assert sorted(t["hyperparameters"]["lr"] for t in body["trials"]) == [0.01, 0.1]
    stored = cluster.store.trials(experiment_id=body["id"])
    assert {t.state.value for t in stored} == {"PENDING"}
    assert [m.kind for m in cluster.queue.sent(QueueName.SCHEDULE)] == [CommandKind.SCHEDULE]


def test_yaml_text_config_is_accepted(api: ApiClient) -> None:
    text = "name: from-yaml\nentrypoint: python train.py\nresources:\n  slots_per_trial: 1\n"
    reply = api.post("/experiments", {"config": text})
    assert reply.status == 201, reply.text
    assert reply.json["name"] == "from-yaml"


def test_a_retry_with_the_client_token_returns_the_same_experiment(api: ApiClient) -> None:
    first = api.post("/experiments", {"config": GRID, "client_token": "tok-1"})
    again = api.post("/experiments", {"config": GRID, "client_token": "tok-1"})
    assert (first.status, again.status) == (201, 200)
    assert first.json["id"] == again.json["id"]
    assert len(api.get("/experiments").json["experiments"]) == 1


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        # an unknown field in the config (a typo)
        ({"config": {"entrypoint": "x", "resourcs": {}}}, 422, "resourcs"),
        (
            {"config": {"entrypoint": "x", "resources": {"slots_pre_trial": 1}}},
            422,
            "resources.slots_pre_trial",
        ),
        # more GPUs than any pool can hold (2 instances x 1 GPU)
        (
            {"config": {"entrypoint": "x", "resources": {"slots_per_trial": 64}}},
            422,
            "resources.slots_per_trial",
        ),
        (
            {"config": {"entrypoint": "x", "resources": {"resource_pool": "nope"}}},
            422,
            "resources.resource_pool",
        ),
        # missing entrypoint
        ({"config": {"name": "no-entrypoint"}}, 422, "entrypoint"),
        # YAML that does not parse: the document as a whole
        ({"config": "name: [unclosed\nentrypoint: x\n"}, 422, ""),
        # the request envelope itself
        ({"config": {"entrypoint": "x"}, "client_tokn": "t"}, 422, "client_tokn"),
        ({}, 422, "config"),
        ({"config": 42}, 422, "config"),
    ],
)
def test_invalid_input_names_the_field_and_writes_nothing(
    api: ApiClient, cluster: Cluster, body: dict[str, Any], status: int, field: str
) -> None:
    api.post("/experiments", {"config": {"entrypoint": "x"}})  # something already there
    before = snapshot(cluster)

    reply = api.post("/experiments", body)

    assert reply.status == status, reply.text
    assert field in [e["field"] for e in reply.json["errors"]], reply.text
    assert reply.json["message"]
    assert "Traceback" not in reply.text
    assert snapshot(cluster) == before


def test_body_that_is_not_json_is_a_400(api: ApiClient, cluster: Cluster) -> None:
    before = snapshot(cluster)
    reply = api.call("POST", "/experiments", raw_body="{not json")
    assert reply.status == 400
    assert reply.json == {"message": "the request body is not valid JSON"}
    assert snapshot(cluster) == before


def test_a_yaml_string_is_never_read_as_a_server_path(api: ApiClient, tmp_path: Any) -> None:
    secret = tmp_path / "cluster.yaml"
    secret.write_text("entrypoint: leaked\n")
    reply = api.post("/experiments", {"config": str(secret)})
    assert reply.status == 422
    assert "leaked" not in reply.text


def test_list_describe_and_pending_reason_after_a_schedule_pass(
    api: ApiClient, cluster: Cluster
) -> None:
    exp_id = api.post("/experiments", {"config": GRID}).json["id"]
    trial_id = api.get(f"/experiments/{exp_id}").json["trials"][0]["id"]
    assert api.get(f"/trials/{trial_id}").json["pending_reason"] == (
        "waiting for the next schedule pass"
    )

    cluster.pump()  # the schedule pass plans launches and writes pending reasons

    listed = api.get("/experiments").json["experiments"]
    assert [e["id"] for e in listed] == [exp_id]
    trials = api.get(f"/experiments/{exp_id}/trials").json["trials"]
    assert len(trials) == 2
    trial = api.get(f"/trials/{trial_id}").json
    assert trial["state"] == "PENDING"
    assert "waiting for" in trial["pending_reason"]
    assert trial["history"][0]["state"] == "PENDING"


def test_unknown_ids_are_404_with_a_message(api: ApiClient) -> None:
    for path in (
        "/experiments/exp-nope",
        "/experiments/exp-nope/trials",
        "/trials/t-nope",
        "/trials/t-nope/logs",
    ):
        reply = api.get(path)
        assert reply.status == 404, path
        assert reply.json["message"].startswith("no ")
    assert api.post("/experiments/exp-nope/kill").json == {"message": "no experiment exp-nope"}


def test_kill_cancels_pending_trials(api: ApiClient, cluster: Cluster) -> None:
    exp_id = api.post("/experiments", {"config": GRID}).json["id"]
    reply = api.post(f"/experiments/{exp_id}/kill")
    assert reply.status == 200, reply.text
    assert reply.json["state"] == "CANCELLED"
    assert reply.json["killed_at"] is not None
    assert reply.json["trials_by_state"]["CANCELLED"] == 2
    assert api.post(f"/experiments/{exp_id}/kill").status == 200  # idempotent


def test_kill_of_a_running_trial_is_stopping_until_the_agent_confirms(
    api: ApiClient, cluster: Cluster, running_agent: Any
) -> None:
    cloud_id, agent_id = running_agent()
    exp_id = api.get("/experiments").json["experiments"][0]["id"]
    cluster.pump()
    api.post(f"/agents/{agent_id}/heartbeat", {}, caller=_agent(cloud_id))
    assert api.post(f"/experiments/{exp_id}/kill").json["state"] == "STOPPING"


def test_run_command(api: ApiClient, cluster: Cluster) -> None:
    reply = api.post(
        "/commands",
        {
            "config": {"bind_mounts": [{"host_path": "/data", "container_path": "/data"}]},
            "argv": ["nvidia-smi", "-L"],
        },
    )
    assert reply.status == 201, reply.text
    assert reply.json["is_command"] is True
    assert reply.json["config"]["entrypoint"] == ["nvidia-smi", "-L"]
    assert reply.json["trials"][0]["max_restarts"] == 0


def test_command_without_a_command_line_names_entrypoint(api: ApiClient, cluster: Cluster) -> None:
    before = snapshot(cluster)
    reply = api.post("/commands", {"config": {}, "argv": []})
    assert reply.status == 422
    assert reply.json["errors"][0]["field"] == "entrypoint"
    assert snapshot(cluster) == before


def _agent(cloud_id: str) -> str:
    from .events import agent_arn

    return agent_arn(cloud_id)


def test_large_experiments_are_paged_not_returned_whole(api: ApiClient) -> None:
    # A 10,000-trial grid would not fit a 6 MB Lambda response: the detail shows the first
    # 100 trials and the trials route pages through all of them.
    big = {**GRID, "hyperparameters": {"lr": {"type": "categorical", "vals": list(range(150))}}}
    created = api.post("/experiments", {"config": big})
    assert created.status == 201, created.text
    assert created.json["trial_count"] == 150
    assert len(created.json["trials"]) == 100 and created.json["trials_truncated"]

    first = api.get(f"/experiments/{created.json['id']}/trials", query={"limit": 100}).json
    assert (len(first["trials"]), first["total"], first["next_offset"]) == (100, 150, 100)
    rest = api.get(f"/experiments/{created.json['id']}/trials", query={"offset": 100}).json
    assert (len(rest["trials"]), rest["next_offset"]) == (50, None)
    ids = [t["id"] for t in first["trials"] + rest["trials"]]
    assert len(set(ids)) == 150


def test_every_problem_of_a_config_is_named_at_once(api: ApiClient) -> None:
    """Field errors, Determined-spelling conflicts and cross-field rules in one reply."""
    config = {
        "entrypoint": "x",
        "image": "a",
        "environment": {"image": "b"},
        "max_restarts": -1,
        "hyperparameters": {"lr": {"type": "double", "minval": 1, "maxval": 0}},
    }
    reply = api.post("/experiments", {"config": config})
    assert reply.status == 422, reply.text
    fields = [e["field"] for e in reply.json["errors"]]
    assert {"image", "max_restarts", "hyperparameters.lr.minval"} <= set(fields), reply.text
