"""Agents of earlier versions keep working against this control plane until replaced.

Two generations are played over HTTP, through the real API:

- the previous version's agent: its bodies are what its own models send
  (``model_dump_json`` of tests/fixtures/upgrade/v1/agent_protocol.py, a frozen copy of
  that version's protocol) and its replies are parsed with the same frozen models, as its
  client does (``model_validate`` of the register and heartbeat replies; the logs reply's
  ``accepted``; the status reply is read for errors only);
- older agents of protocol 1, from before optional fields existed: the literal bodies below
  leave out everything that has a default (no ``metrics``, ``draining``,
  ``interruption_notice``, ``gpu_metrics``, ``protocol``, ``agent_version``, ...).
"""

from __future__ import annotations

import json
from typing import Any

from corral.domain.instance import InstanceState
from corral.domain.trial import TrialState
from tests.fixtures.upgrade.v1 import agent_protocol as old
from tests.services.harness import Cluster

from .conftest import ApiClient, Reply
from .events import agent_arn


def send(api: ApiClient, path: str, body: str, cloud_id: str) -> Reply:
    """POST exactly these bytes as the agent of ``cloud_id``."""
    return api.call("POST", path, raw_body=body, caller=agent_arn(cloud_id))


def booted(api: ApiClient, cluster: Cluster) -> str:
    """Submit one experiment and boot the instance it plans; its cloud id."""
    reply = api.post("/experiments", {"config": {"entrypoint": "python train.py"}})
    assert reply.status == 201, reply.text
    cluster.pump()
    cluster.clock.advance(60)
    (cloud_id,) = cluster.running_cloud_ids()
    return cloud_id


def record_id(cluster: Cluster, cloud_id: str) -> str | None:
    return cluster.cloud.tags(cloud_id).get("corral-record")


def test_the_previous_agent_registers_runs_a_trial_and_ships_logs_and_metrics(
    api: ApiClient, cluster: Cluster
) -> None:
    cloud_id = booted(api, cluster)
    register = old.RegisterRequest(
        cloud_id=cloud_id,
        record_id=record_id(cluster, cloud_id),
        identity=old.Identity(
            kind=old.IdentityKind.EC2, document=json.dumps({"instanceId": cloud_id})
        ),
        instance_type="g.1",
        zone="zone-a",
        private_ip="10.0.0.5",
        gpus=[old.GpuInfo(index=0, uuid="GPU-0", name="fake", memory_mib=1024)],
        agent_version="previous",
    )
    reply = send(api, "/agents/register", register.model_dump_json(), cloud_id)
    assert reply.status == 200, reply.text
    agent_id = old.RegisterResponse.model_validate(reply.json).agent_id
    cluster.pump()  # the registration woke the scheduler: the trial is assigned

    beat = send(
        api, f"/agents/{agent_id}/heartbeat", old.HeartbeatRequest().model_dump_json(), cloud_id
    )
    assert beat.status == 200, beat.text
    (start,) = old.HeartbeatResponse.model_validate(beat.json).start
    trial_id = start.trial_id

    status = old.TrialStatus(trial_id=trial_id, state=old.AgentTrialState.RUNNING)
    path = f"/agents/{agent_id}/trials/{trial_id}/status"
    assert send(api, path, status.model_dump_json(), cloud_id).status == 200

    lines = old.LogBatch(lines=[old.LogLineIn(seq=0, at=1.0, line="epoch 1")])
    logged = send(
        api, f"/agents/{agent_id}/trials/{trial_id}/logs", lines.model_dump_json(), cloud_id
    )
    assert logged.status == 200, logged.text
    assert int(logged.json.get("accepted", -1)) == 1  # what the old client reads

    point = old.MetricPointIn(seq=1, kind="validation", batches=10, values={"loss": 0.5}, at=2.0)
    running = old.HeartbeatRequest(
        trials=[status],
        gpu_metrics=[old.GpuMetric(index=0, utilization_pct=90.0, memory_used_mib=512.0)],
        metrics=[old.TrialMetrics(trial_id=trial_id, points=[point])],
    )
    beat = send(api, f"/agents/{agent_id}/heartbeat", running.model_dump_json(), cloud_id)
    assert beat.status == 200, beat.text
    assert old.HeartbeatResponse.model_validate(beat.json).metrics_retry == []

    exited = old.TrialStatus(
        trial_id=trial_id, state=old.AgentTrialState.EXITED, exit_code=0, log_end_seq=0
    )
    assert send(api, path, exited.model_dump_json(), cloud_id).status == 200
    assert cluster.trial(trial_id).state is TrialState.COMPLETED
    assert [line.line for line in cluster.store.logs(trial_id)] == ["epoch 1"]
    view = api.get(f"/trials/{trial_id}/metrics", query={"kind": "validation"})
    assert view.status == 200 and "0.5" in view.text


# The bodies an agent of protocol 1 sent before any optional field existed.
def oldest_register(cloud_id: str, record: str | None) -> dict[str, Any]:
    return {
        "cloud_id": cloud_id,
        "record_id": record,
        "identity": {"kind": "ec2", "document": json.dumps({"instanceId": cloud_id})},
        "instance_type": "g.1",
        "zone": "zone-a",
        "gpus": [{"index": 0, "uuid": "GPU-0", "name": "fake", "memory_mib": 1024}],
    }


def test_an_agent_from_before_optional_fields_is_accepted_and_understood(
    api: ApiClient, cluster: Cluster
) -> None:
    cloud_id = booted(api, cluster)
    body = json.dumps(oldest_register(cloud_id, record_id(cluster, cloud_id)))
    reply = send(api, "/agents/register", body, cloud_id)
    assert reply.status == 200, reply.text
    agent_id = old.RegisterResponse.model_validate(reply.json).agent_id
    cluster.pump()

    beat = send(api, f"/agents/{agent_id}/heartbeat", '{"trials":[]}', cloud_id)
    assert beat.status == 200, beat.text
    (start,) = old.HeartbeatResponse.model_validate(beat.json).start
    trial_id = start.trial_id
    record = cluster.store.get_instance(agent_id)
    assert record is not None and record.state is InstanceState.BUSY  # not taken as draining

    path = f"/agents/{agent_id}/trials/{trial_id}/status"
    running = json.dumps({"trial_id": trial_id, "state": "running"})
    assert send(api, path, running, cloud_id).status == 200
    logs = '{"lines":[{"seq":0,"at":1.0,"line":"hello"}]}'
    assert send(api, f"/agents/{agent_id}/trials/{trial_id}/logs", logs, cloud_id).status == 200
    beat = send(api, f"/agents/{agent_id}/heartbeat", f'{{"trials":[{running}]}}', cloud_id)
    assert beat.status == 200, beat.text
    assert old.HeartbeatResponse.model_validate(beat.json).stop == []
    exited = json.dumps({"trial_id": trial_id, "state": "exited", "exit_code": 0})
    assert send(api, path, exited, cloud_id).status == 200
    assert cluster.trial(trial_id).state is TrialState.COMPLETED
    assert [line.line for line in cluster.store.logs(trial_id)] == ["hello"]
