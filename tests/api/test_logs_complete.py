"""A reader knows when a finished trial's log stream is complete: the agent's terminal status
says where the run's output ends (``log_end_seq``), and the logs page says whether the lines up
to there are in, even if the status overtook the last log batch."""

from __future__ import annotations

from tests.services.harness import Cluster

from .conftest import ApiClient
from .events import agent_arn


def _assigned(api: ApiClient, cluster: Cluster) -> tuple[str, str, str]:
    """A command (never restarted) placed on a registered agent: (trial id, the agent's
    caller identity, the agent's path for the trial)."""
    reply = api.post("/commands", {"config": {}, "argv": ["sh", "-c", "exit 3"]})
    assert reply.status == 201, reply.text
    cluster.pump()
    cluster.clock.advance(60)
    (cloud_id,) = cluster.running_cloud_ids()
    agent_id = api.register(cloud_id).json["agent_id"]
    cluster.pump()
    reply = api.post(f"/agents/{agent_id}/heartbeat", {}, caller=agent_arn(cloud_id))
    (start,) = reply.json["start"]
    trial_id = start["trial_id"]
    return trial_id, agent_arn(cloud_id), f"/agents/{agent_id}/trials/{trial_id}"


def test_logs_are_incomplete_until_the_last_line_the_status_named_arrives(
    api: ApiClient, cluster: Cluster
) -> None:
    trial_id, me, base = _assigned(api, cluster)
    lines = [{"seq": 100 + n, "at": 1.0 + n, "line": f"out {n}"} for n in range(4)]
    api.post(f"{base}/logs", {"lines": lines[:1]}, caller=me)
    # The terminal status overtakes the last batch (the agent's flush failed meanwhile).
    status = {"trial_id": trial_id, "state": "exited", "exit_code": 3, "log_end_seq": 103}
    assert api.post(f"{base}/status", status, caller=me).json["trial_state"] == "FAILED"

    page = api.get(f"/trials/{trial_id}/logs").json
    assert page["trial_done"] is True
    assert [x["line"] for x in page["lines"]] == ["out 0"]
    assert (page["log_end_seq"], page["logs_complete"]) == (103, False)
    assert page["exit_code"] == 3

    api.post(f"{base}/logs", {"lines": lines[1:]}, caller=me)
    rest = api.get(f"/trials/{trial_id}/logs", query={"after_seq": page["next_after_seq"]}).json
    assert [x["line"] for x in rest["lines"]] == ["out 1", "out 2", "out 3"]
    assert rest["logs_complete"] is True
    # A page that stops short of the end (limit) is not the end either.
    short = api.get(f"/trials/{trial_id}/logs", query={"limit": 2}).json
    assert short["has_more"] is True and short["logs_complete"] is False


def test_a_running_trial_is_never_complete_and_an_unknown_end_is_the_stored_end(
    api: ApiClient, cluster: Cluster
) -> None:
    trial_id, me, base = _assigned(api, cluster)
    api.post(f"{base}/logs", {"lines": [{"seq": 1, "at": 1.0, "line": "hi"}]}, caller=me)
    running = api.get(f"/trials/{trial_id}/logs").json
    assert running["logs_complete"] is False and running["log_end_seq"] is None
    # An agent that does not say where its output ends (an older agent): done is complete.
    api.post(f"{base}/status", {"trial_id": trial_id, "state": "exited", "exit_code": 0}, caller=me)
    done = api.get(f"/trials/{trial_id}/logs").json
    assert done["trial_state"] == "COMPLETED" and done["logs_complete"] is True
    assert done["exit_code"] == 0
