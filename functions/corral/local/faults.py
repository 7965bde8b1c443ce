"""Fault injection for the local stack: spot interruptions and capacity errors.

Both go through ``faults.json`` in the state directory, so the CLI (another process) injects
and the stack applies:

- ``interrupt``: what EC2 does two minutes before it takes a spot instance back, compressed.
  The "EC2 Spot Instance Interruption Warning" goes through EventBridge ``put_events`` (the
  template's rule routes it to the interruption queue), the notice reaches the agent through
  its instance's metadata service (``spot/instance-action``, read from the notice file this
  writes: ``corral.local.imds``), and the stack's emulator terminates the instance when the
  (shortened) notice window ends.
- ``rebalance``: an "EC2 Instance Rebalance Recommendation", through EventBridge and the
  metadata service alike; nothing is terminated.
- ``capacity``: RunInstances for a matching offering fails with
  ``InsufficientInstanceCapacity``, via a ``before-call.ec2.RunInstances`` hook (moto never
  runs out of capacity).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from corral.local.state import StateDir

log = logging.getLogger(__name__)

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
STATE_CHANGE = "EC2 Instance State-change Notification"
REBALANCE = "EC2 Instance Rebalance Recommendation"
DEFAULT_NOTICE_S = 10.0  # dev's stand-in for EC2's two minutes


class FaultError(RuntimeError):
    """A fault that cannot be injected (unknown instance, bad offering ...)."""


class NotSpotError(FaultError):
    """An interruption asked for an on-demand instance: EC2 never interrupts those."""

    def __init__(self, instance_id: str) -> None:
        super().__init__(
            f"{instance_id} is on-demand: only spot instances get interruption notices"
        )
        self.instance_id = instance_id


@dataclass(frozen=True)
class OfferingMatch:
    """``TYPE``, ``TYPE:CAPACITY`` or an offering key ``TYPE|LOCATION|CAPACITY``."""

    instance_type: str
    location: str | None = None
    capacity_type: str | None = None

    @classmethod
    def parse(cls, text: str) -> OfferingMatch:
        parts = text.split("|") if "|" in text else text.split(":")
        parts = [p.strip() or "" for p in parts]
        if not parts[0] or len(parts) > 3:
            raise FaultError(
                f"bad offering {text!r}: use TYPE, TYPE:spot or TYPE|LOCATION|CAPACITY"
            )
        if len(parts) == 2:
            parts = [parts[0], "", parts[1]]
        capacity = parts[2] if len(parts) == 3 and parts[2] else None
        if capacity not in (None, "spot", "on-demand"):
            raise FaultError(f"bad capacity type {capacity!r}: spot or on-demand")
        location = parts[1] if len(parts) >= 2 and parts[1] else None
        return cls(parts[0], location, capacity)

    def key(self) -> str:
        return f"{self.instance_type}|{self.location or '*'}|{self.capacity_type or '*'}"

    def matches(self, params: dict[str, Any], region: str) -> bool:
        if params.get("InstanceType") != self.instance_type:
            return False
        market = (params.get("InstanceMarketOptions") or {}).get("MarketType")
        capacity = "spot" if market == "spot" else "on-demand"
        if self.capacity_type and capacity != self.capacity_type:
            return False
        nics = params.get("NetworkInterfaces") or [{}]
        location = params.get("SubnetId") or nics[0].get("SubnetId") or region
        return self.location is None or location == self.location


# ---- capacity -------------------------------------------------------------------------
def set_unavailable(state: StateDir, offering: str, unavailable: bool = True) -> str:
    match = OfferingMatch.parse(offering)
    with state.edit_faults() as faults:
        keys = set(faults.get("unavailable", []))
        (keys.add if unavailable else keys.discard)(match.key())
        faults["unavailable"] = sorted(keys)
    return match.key()


def unavailable_offerings(state: StateDir) -> list[OfferingMatch]:
    out = []
    for key in state.read_faults().get("unavailable", []):
        t, loc, cap = [*str(key).split("|"), "*", "*"][:3]
        out.append(OfferingMatch(t, None if loc == "*" else loc, None if cap == "*" else cap))
    return out


class _Refused:
    """Enough of an HTTP response for botocore to raise the parsed error."""

    status_code = 500
    headers: dict[str, str] = {}
    content = b""
    text = ""


def capacity_hook(state: StateDir) -> Any:
    """A ``before-call.ec2.RunInstances`` handler: returning a response short-circuits the
    call, so botocore raises ``ClientError(InsufficientInstanceCapacity)`` as EC2 would."""

    def before_call(
        params: dict[str, Any], model: Any = None, context: Any = None, **_: Any
    ) -> Any:
        body = params.get("body") or {}
        region = str((context or {}).get("client_region") or "")
        for match in unavailable_offerings(state):
            if match.matches(_unflatten(body), region):
                log.info("injected InsufficientInstanceCapacity for %s", match.key())
                error = {
                    "Code": "InsufficientInstanceCapacity",
                    "Message": f"We currently do not have sufficient {match.instance_type} "
                    "capacity (injected by corral dev capacity).",
                }
                return _Refused(), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 500}}
        return None

    return before_call


def _unflatten(body: dict[str, Any]) -> dict[str, Any]:
    """EC2's query body (``InstanceMarketOptions.MarketType=spot``) as the nested params."""
    out: dict[str, Any] = {}
    for flat, value in body.items():
        parts = str(flat).split(".")
        if parts[0] == "NetworkInterface":  # NetworkInterface.1.SubnetId
            parts = ["NetworkInterfaces", *parts[2:]]
            out.setdefault("NetworkInterfaces", [{}])
            out["NetworkInterfaces"][0][parts[-1]] = value
            continue
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def install_capacity_faults(state: StateDir, events: Any) -> None:
    """``events``: a botocore event emitter (a session's, inherited by clients made later,
    or ``client.meta.events``)."""
    events.register("before-call.ec2.RunInstances", capacity_hook(state), unique_id="corral-cap")


def install_handler_capacity_faults(state: StateDir) -> None:
    """On the session the handlers' adapters make their clients from
    (``corral.adapters.aws.clients``), made afresh from the environment as it is now: the EC2
    provider's launches then meet ``corral dev capacity``'s refusals."""
    from corral.adapters.aws import clients

    clients.reset()
    install_capacity_faults(state, clients.session().events)


# ---- interruptions --------------------------------------------------------------------
def _running_spot(session: Any, instance_id: str) -> None:
    """Raise unless ``instance_id`` is a running spot instance in moto."""
    ec2 = session.client("ec2")
    try:
        found = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    except Exception as exc:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code.startswith("InvalidInstanceID"):  # .NotFound, .Malformed
            raise FaultError(f"no EC2 instance {instance_id} in the local stack") from None
        raise FaultError(f"cannot look up {instance_id} in moto: {exc}") from None
    instance = found[0]["Instances"][0] if found and found[0]["Instances"] else None
    if instance is None or instance["State"]["Name"] not in ("pending", "running"):
        raise FaultError(f"instance {instance_id} is not running")
    # As EC2 (and ec2_provider) tell them apart: only a spot instance has a lifecycle of
    # "spot". An on-demand one is never taken back, so a notice to it would test a path
    # production cannot take (and the scheduler would count a preemption that cannot happen).
    if instance.get("InstanceLifecycle") != "spot":
        raise NotSpotError(instance_id)


def interrupt(state: StateDir, session: Any, instance_id: str, notice_s: float) -> float:
    """Send the warning both ways and schedule the termination; returns its epoch time."""
    _running_spot(session, instance_id)
    terminate_at = time.time() + notice_s
    state.write(state.notice_file(instance_id), f"{notice_s:g}\n")
    put_ec2_event(
        session,
        SPOT_WARNING,
        instance_id,
        {"instance-id": instance_id, "instance-action": "terminate"},
    )
    with state.edit_faults() as faults:
        faults.setdefault("terminate_at", {})[instance_id] = terminate_at
    return terminate_at


def rebalance(state: StateDir, session: Any, instance_id: str) -> None:
    """What EC2 does when a spot instance's risk of interruption rises: a rebalance
    recommendation through EventBridge and the metadata service
    (``events/recommendations/rebalance``), and no termination."""
    _running_spot(session, instance_id)
    state.write(state.rebalance_file(instance_id), f"{time.time():.3f}\n")
    put_ec2_event(session, REBALANCE, instance_id, {"instance-id": instance_id})


def due_terminations(state: StateDir, now: float | None = None) -> list[str]:
    """Instances whose notice window has ended; removed from the file as they are returned."""
    now = time.time() if now is None else now
    if not state.read_faults().get("terminate_at"):
        return []
    with state.edit_faults() as faults:
        pending: dict[str, float] = faults.get("terminate_at", {})
        due = [i for i, at in pending.items() if at <= now]
        faults["terminate_at"] = {i: at for i, at in pending.items() if at > now}
    return due


def put_ec2_event(session: Any, detail_type: str, instance_id: str, detail: dict[str, Any]) -> None:
    """An EC2 event on the default bus, as EC2 would publish it (``time`` = now: EC2 takes
    a spot instance about two minutes after its warning's time)."""
    region = session.region_name or "us-east-1"
    arn = f"arn:aws:ec2:{region}:123456789012:instance/{instance_id}"
    entry: dict[str, Any] = {
        "Source": "aws.ec2",
        "DetailType": detail_type,
        "Detail": json.dumps(detail),
        "Resources": [arn],
    }
    reply = session.client("events").put_events(Entries=[entry])
    if reply.get("FailedEntryCount"):
        raise FaultError(f"EventBridge refused the {detail_type}: {reply['Entries']}")
