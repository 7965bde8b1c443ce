"""What arrives on the interruptions topic, and what it means.

Two kinds of payload share the topic (a Cloud Function has one trigger):

- Corral's own ``{"kind": "reconcile"}``, published by the Cloud Scheduler job: run a pass;
- Cloud Audit Logs entries routed by a log sink (deploy.sh), for the system event
  ``compute.instances.preempted``: Compute Engine preempted a Spot/preemptible VM (the
  guest gets about 30 s). The instance is named by ``protoPayload.resourceName``
  (``projects/P/zones/Z/instances/NAME``); its name is Corral's cloud id on GCE. The agent's
  own metadata watcher reports the same preemption through its heartbeat when it can;
  this is the path that works when it cannot.

Entries about instances that are not ours arrive too (a sink cannot filter on labels
cheaply): the services ignore cloud ids they have no record of.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PREEMPTED = "compute.instances.preempted"


@dataclass(frozen=True, slots=True)
class Preempted:
    instance_name: str
    zone: str
    project: str


def preemption(payload: Mapping[str, Any]) -> Preempted | None:
    """The preemption a log entry reports, or None if the payload is something else."""
    proto = payload.get("protoPayload")
    if not isinstance(proto, Mapping) or proto.get("methodName") != PREEMPTED:
        return None
    parts = str(proto.get("resourceName") or "").split("/")
    # projects/<project>/zones/<zone>/instances/<name>
    if len(parts) != 6 or parts[0] != "projects" or parts[2] != "zones" or parts[4] != "instances":
        return None
    return Preempted(instance_name=parts[5], zone=parts[3], project=parts[1])


__all__ = ["PREEMPTED", "Preempted", "preemption"]
