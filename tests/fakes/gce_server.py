"""A small fake Compute Engine REST API on loopback, for the GCE provider's tests.

There is no Compute Engine emulator. This serves just what ``google-cloud-compute`` sends
for the calls Corral makes, in the real wire format (``/compute/v1/...``, camelCase JSON,
operations, Google's error envelope), so the provider is tested through the real client
library, its REST transport and its pagers:

- ``instances.insert`` (with ``requestId`` idempotency: the same id returns the first
  operation and creates nothing; a taken name is 409 ``alreadyExists``), ``get``, ``list``
  and ``aggregatedList`` (``filter`` with ``FIELD = "VALUE"`` / ``FIELD != "VALUE"`` clauses
  joined by AND, on ``labels.KEY``, ``name`` or ``status``; ``maxResults`` / ``pageToken``
  paging), ``delete``;
- ``instances.stop`` and ``start`` with GCE's status transitions: stop takes a VM through
  STOPPING to TERMINATED (GCE's word for stopped: disk and labels stay); start takes a
  TERMINATED VM back to RUNNING. Stopping a stopped VM and starting a running one succeed
  and change nothing; either call on a VM in the middle of another operation is 400
  ``resourceNotReady``; a VM that is gone is 404. Both honour ``requestId`` as insert does;
- ``zoneOperations.get``, ``wait`` and ``list`` (``filter`` as above, on ``operationType``
  and ``status``);
- fault injection: ``fail_next_insert`` / ``fail_next_start`` answer the next insert / start
  with an HTTP error or with an operation that finishes in error (how GCE reports stockouts:
  a start refused for capacity leaves the VM TERMINATED), ``slow_operations`` leaves insert
  operations RUNNING until waited on ``n`` times, and ``hold`` leaves the stops, starts or
  deletes named in it half done (the VM STOPPING or STAGING, the operation RUNNING) until
  ``settle()``. Unheld, the transitions complete at once (an insert is RUNNING at once, a
  deleted VM is gone at once).

What it does not model: quotas, real validation of the body (it stores what it gets), label
charset rules, the PROVISIONING and STAGING of a fresh insert.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.http import QuietHandler, send_json

_ZONE_PATH = re.compile(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/(instances|operations)(.*)$")
_AGGREGATED = re.compile(r"^/compute/v1/projects/([^/]+)/aggregated/instances$")
_CLAUSE = re.compile(r'([A-Za-z][\w.-]*)\s*(!=|=)\s*"?([^"\s)]*)"?')
# Where a VM in one of these statuses can be stopped from (stop is a no-op when it already is
# TERMINATED); start leaves a VM in _UP as it is.
_STOPPABLE = {"PROVISIONING", "STAGING", "RUNNING", "REPAIRING", "SUSPENDED"}
_UP = {"PROVISIONING", "STAGING", "RUNNING"}
# operationType -> (the status while the operation runs, the status it ends in; None: gone)
_TRANSITIONS: dict[str, tuple[str, str | None]] = {
    "stop": ("STOPPING", "TERMINATED"),
    "start": ("STAGING", "RUNNING"),
    "delete": ("STOPPING", None),
}


@dataclass
class Fault:
    http_status: int | None = None  # an HTTP error on the insert call itself
    reason: str = ""
    op_error_code: str | None = None  # ... or an operation that ends in this error
    message: str = "injected"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class FakeCompute:
    """The state behind the server; tests read and change it directly."""

    instances: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_request_id: dict[str, str] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    start_faults: list[Fault] = field(default_factory=list)
    slow_operations: int = 0  # waits an insert operation needs before it is DONE
    hold: set[str] = field(default_factory=set)  # "stop" / "start" / "delete": left half done
    # Held operations: operation name -> (the instance's key, its status once done; None: gone)
    pending: dict[str, tuple[tuple[str, str, str], str | None]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _counter: int = 0

    def fail_next_insert(self, fault: Fault) -> None:
        self.faults.append(fault)

    def fail_next_start(self, fault: Fault) -> None:
        self.start_faults.append(fault)

    def settle(self) -> None:
        """Finish every held stop, start and delete: the VMs reach their end status."""
        with self.lock:
            for name in list(self.pending):
                self._finish(name)

    def _finish(self, op_name: str) -> None:
        key, final = self.pending.pop(op_name)
        self.operations[op_name] |= {"status": "DONE", "progress": 100}
        if final is None:
            self.instances.pop(key, None)
        elif key in self.instances:
            self._set_status(self.instances[key], final)

    def _set_status(self, instance: dict[str, Any], status: str) -> None:
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        if status == "RUNNING":
            instance["lastStartTimestamp"] = now
        elif status == "TERMINATED":
            instance["lastStopTimestamp"] = now
        instance["status"] = status

    def busy(self, key: tuple[str, str, str]) -> bool:
        """Whether an operation on the instance is still running."""
        return any(k == key for k, _ in self.pending.values())

    def add_instance(self, project: str, zone: str, name: str, labels: dict[str, str]) -> None:
        """An instance created outside Corral (by someone else)."""
        body = {"name": name, "machineType": f"zones/{zone}/machineTypes/e2-small"}
        self._create(project, zone, body | {"labels": labels})

    def status(self, name: str) -> str | None:
        for (_, _, n), instance in self.instances.items():
            if n == name:
                return str(instance["status"])
        return None

    def inserts(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST" and r.path.endswith("/instances")]

    def _next_id(self) -> int:
        self._counter += 1
        return self._counter

    def _create(self, project: str, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        base = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
        instance = dict(body)
        instance |= {
            "kind": "compute#instance",
            "id": str(1_000_000 + self._next_id()),
            "zone": base,
            "status": "RUNNING",
            "creationTimestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "lastStartTimestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "selfLink": f"{base}/instances/{body['name']}",
        }
        for n, nic in enumerate(instance.get("networkInterfaces") or []):
            nic.setdefault("networkIP", f"10.128.0.{self._counter % 250 + 2}")
            nic.setdefault("name", f"nic{n}")
        self.instances[(project, zone, body["name"])] = instance
        return instance

    def _operation(self, project: str, zone: str, kind: str, target: str) -> dict[str, Any]:
        name = f"operation-{self._next_id()}"
        base = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
        op = {
            "kind": "compute#operation",
            "id": str(self._counter),
            "name": name,
            "zone": base,
            "operationType": kind,
            "targetLink": f"{base}/instances/{target}",
            "status": "DONE",
            "progress": 100,
            "selfLink": f"{base}/operations/{name}",
        }
        self.operations[name] = op
        return op

    def _transition(self, key: tuple[str, str, str], kind: str) -> dict[str, Any]:
        """Begin a stop, start or delete: done at once, or held half done (``hold``)."""
        project, zone, name = key
        op = self._operation(project, zone, kind, name)
        during, final = _TRANSITIONS[kind]
        self.pending[op["name"]] = (key, final)
        if kind in self.hold:
            op |= {"status": "RUNNING", "progress": 0}
            self._set_status(self.instances[key], during)
        else:
            self._finish(op["name"])
        return op


class GceError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message

    def envelope(self) -> dict[str, Any]:
        detail = {"message": self.message, "domain": "global", "reason": self.reason}
        return {"error": {"code": self.status, "message": self.message, "errors": [detail]}}


def _matches(resource: dict[str, Any], expression: str) -> bool:
    """``FIELD = "VALUE"`` / ``FIELD != "VALUE"`` clauses, all of them (GCE's implicit AND)."""
    labels = resource.get("labels") or {}
    for name, operator, value in _CLAUSE.findall(expression or ""):
        if name.startswith("labels."):
            found = labels.get(name.removeprefix("labels."))
        else:
            found = resource.get(name)
        if (str(found) == value) != (operator == "="):
            return False
    return True


class _Handler(QuietHandler):
    server: FakeGceServer
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null") if length else None
        state = self.server.state
        with state.lock:
            state.requests.append(Recorded(self.command, url.path, query, body))
            try:
                status, reply = 200, self._route(self.command, url.path, query, body)
            except GceError as error:
                status, reply = error.status, error.envelope()
        send_json(self, status, reply)

    do_GET = do_POST = do_DELETE = _serve

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        state = self.server.state
        aggregated = _AGGREGATED.match(path)
        if aggregated and method == "GET":
            found = [
                (zone, i)
                for (p, zone, _), i in sorted(state.instances.items(), key=lambda kv: kv[0])
                if p == aggregated[1] and _matches(i, query.get("filter", ""))
            ]
            page, token = _page(found, query)
            items: dict[str, Any] = {}
            for zone, instance in page:
                items.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(instance)
            return {"kind": "compute#instanceAggregatedList", "items": items} | token
        match = _ZONE_PATH.match(path)
        if match is None:
            raise GceError(404, "notFound", f"no such path {path}")
        project, zone, collection, rest = match.groups()
        if collection == "operations":
            return self._operation(project, zone, rest.strip("/"), method, query)
        name, _, action = rest.strip("/").partition("/")
        if not name and method == "POST":
            return self._insert(project, zone, body, query.get("requestId"))
        if not name and method == "GET":
            listed = [
                i
                for (p, z, _), i in sorted(state.instances.items(), key=lambda kv: kv[0])
                if (p, z) == (project, zone) and _matches(i, query.get("filter", ""))
            ]
            page, token = _page(listed, query)
            return {"kind": "compute#instanceList", "items": page} | token
        instance = state.instances.get((project, zone, name))
        if instance is None:
            raise GceError(404, "notFound", f"The resource 'instances/{name}' was not found")
        key = (project, zone, name)
        if method == "GET" and not action:
            return instance
        if method == "DELETE" and not action:
            return _public(state._transition(key, "delete"))
        if method == "POST" and action in ("stop", "start"):
            return self._stop_or_start(key, action, query.get("requestId"))
        raise GceError(405, "methodNotAllowed", method)

    def _stop_or_start(
        self, key: tuple[str, str, str], action: str, request_id: str | None
    ) -> dict[str, Any]:
        state = self.server.state
        if request_id is not None and request_id in state.by_request_id:
            return _public(state.operations[state.by_request_id[request_id]])
        status = str(state.instances[key]["status"])
        if state.busy(key) or status in ("STOPPING", "SUSPENDING"):
            raise GceError(400, "resourceNotReady", f"The resource '{key[2]}' is not ready")
        if action == "stop":
            op = self._stop(key, status)
        else:
            op = self._start(key, status)
        if request_id is not None:
            state.by_request_id[request_id] = op["name"]
        return _public(op)

    def _stop(self, key: tuple[str, str, str], status: str) -> dict[str, Any]:
        state = self.server.state
        if status in _STOPPABLE:
            return state._transition(key, "stop")
        return state._operation(key[0], key[1], "stop", key[2])  # already stopped: no change

    def _start(self, key: tuple[str, str, str], status: str) -> dict[str, Any]:
        state = self.server.state
        if status in _UP:
            return state._operation(key[0], key[1], "start", key[2])  # already up: no change
        if status != "TERMINATED":
            raise GceError(400, "invalid", f"Instance '{key[2]}' is {status}: resume it instead")
        fault = state.start_faults.pop(0) if state.start_faults else None
        if fault is not None and fault.http_status is not None:
            raise GceError(fault.http_status, fault.reason, fault.message)
        if fault is not None and fault.op_error_code is not None:
            # Refused (a stockout): the VM stays TERMINATED, the operation ends in error.
            op = state._operation(key[0], key[1], "start", key[2])
            error = {"code": fault.op_error_code, "message": fault.message}
            op |= {"error": {"errors": [error]}, "httpErrorStatusCode": 503}
            return op
        return state._transition(key, "start")

    def _insert(
        self, project: str, zone: str, body: dict[str, Any], request_id: str | None
    ) -> dict[str, Any]:
        state = self.server.state
        if request_id is not None and request_id in state.by_request_id:
            return _public(state.operations[state.by_request_id[request_id]])
        fault = state.faults.pop(0) if state.faults else None
        if fault is not None and fault.http_status is not None:
            raise GceError(fault.http_status, fault.reason, fault.message)
        if (project, zone, body["name"]) in state.instances:
            raise GceError(409, "alreadyExists", f"The resource '{body['name']}' already exists")
        op = state._operation(project, zone, "insert", body["name"])
        if fault is not None and fault.op_error_code is not None:
            error = {"code": fault.op_error_code, "message": fault.message}
            op |= {"error": {"errors": [error]}, "httpErrorStatusCode": 503}
        else:
            state._create(project, zone, body)
        if state.slow_operations:
            op |= {"status": "RUNNING", "progress": 0, "_waits": state.slow_operations}
        if request_id is not None:
            state.by_request_id[request_id] = op["name"]
        return _public(op)

    def _operation(
        self, project: str, zone: str, rest: str, method: str, query: dict[str, str]
    ) -> dict[str, Any]:
        name, _, action = rest.partition("/")
        if not name and method == "GET":
            found = [
                _public(op)
                for op in self.server.state.operations.values()
                if op["zone"].endswith(f"/projects/{project}/zones/{zone}")
                and _matches(op, query.get("filter", ""))
            ]
            page, token = _page(found, query)
            return {"kind": "compute#operationList", "items": page} | token
        op = self.server.state.operations.get(name)
        if op is None:
            raise GceError(404, "notFound", f"operation {name} not found")
        if action == "wait" or method == "GET":
            waits = int(op.get("_waits", 0))
            if action == "wait" and waits > 0:
                op["_waits"] = waits - 1
                if waits == 1:
                    op |= {"status": "DONE", "progress": 100}
        return _public(op)


def _public(op: dict[str, Any]) -> dict[str, Any]:
    """The operation as GCE shows it (without the fake's own bookkeeping keys)."""
    return {k: v for k, v in op.items() if not k.startswith("_")}


def _page(items: list[Any], query: dict[str, str]) -> tuple[list[Any], dict[str, str]]:
    start = int(query.get("pageToken") or 0)
    size = int(query.get("maxResults") or 500)
    token = {"nextPageToken": str(start + size)} if start + size < len(items) else {}
    return items[start : start + size], token


class FakeGceServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = FakeCompute()
        self.endpoint = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-gce", daemon=True
        )

    def __enter__(self) -> FakeGceServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
