"""A small fake Compute Engine REST API on loopback, for the GCE provider's tests.

There is no Compute Engine emulator. This serves just what ``google-cloud-compute`` sends
for the calls Corral makes, in the real wire format (``/compute/v1/...``, camelCase JSON,
operations, Google's error envelope), so the provider is tested through the real client
library, its REST transport and its pagers:

- ``instances.insert`` (with ``requestId`` idempotency: the same id returns the first
  operation and creates nothing; a taken name is 409 ``alreadyExists``), ``get``, ``list``
  and ``aggregatedList`` (``filter`` with ``labels.KEY = "VALUE"`` clauses joined by AND,
  ``maxResults`` / ``pageToken`` paging), ``delete`` (the instance is gone at once);
- ``zoneOperations.get`` and ``wait``;
- fault injection: ``fail_next_insert`` answers the next insert with an HTTP error or with
  an operation that finishes in error (how GCE reports stockouts), ``slow_operations``
  leaves insert operations RUNNING until waited on ``n`` times.

What it does not model: quotas, real validation of the body (it stores what it gets), label
charset rules, instance status transitions (inserted instances are RUNNING at once).
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
_CLAUSE = re.compile(r'labels\.([^\s=!]+)\s*=\s*"?([^"\s)]*)"?')


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
    slow_operations: int = 0  # waits an insert operation needs before it is DONE
    lock: threading.RLock = field(default_factory=threading.RLock)
    _counter: int = 0

    def fail_next_insert(self, fault: Fault) -> None:
        self.faults.append(fault)

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


class GceError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message

    def envelope(self) -> dict[str, Any]:
        detail = {"message": self.message, "domain": "global", "reason": self.reason}
        return {"error": {"code": self.status, "message": self.message, "errors": [detail]}}


def _matches(instance: dict[str, Any], expression: str) -> bool:
    labels = instance.get("labels") or {}
    return all(labels.get(k) == v for k, v in _CLAUSE.findall(expression or ""))


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
            return self._operation(rest.strip("/"), method)
        name = rest.strip("/")
        if not name and method == "POST":
            return self._insert(project, zone, body, query.get("requestId"))
        if not name and method == "GET":
            found = [
                i
                for (p, z, _), i in sorted(state.instances.items(), key=lambda kv: kv[0])
                if (p, z) == (project, zone) and _matches(i, query.get("filter", ""))
            ]
            page, token = _page(found, query)
            return {"kind": "compute#instanceList", "items": page} | token
        instance = state.instances.get((project, zone, name))
        if instance is None:
            raise GceError(404, "notFound", f"The resource 'instances/{name}' was not found")
        if method == "GET":
            return instance
        if method == "DELETE":
            del state.instances[(project, zone, name)]
            return state._operation(project, zone, "delete", name)
        raise GceError(405, "methodNotAllowed", method)

    def _insert(
        self, project: str, zone: str, body: dict[str, Any], request_id: str | None
    ) -> dict[str, Any]:
        state = self.server.state
        if request_id is not None and request_id in state.by_request_id:
            return state.operations[state.by_request_id[request_id]]
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
        return {k: v for k, v in op.items() if not k.startswith("_")}

    def _operation(self, rest: str, method: str) -> dict[str, Any]:
        name, _, action = rest.partition("/")
        op = self.server.state.operations.get(name)
        if op is None:
            raise GceError(404, "notFound", f"operation {name} not found")
        if action == "wait" or method == "GET":
            waits = int(op.get("_waits", 0))
            if action == "wait" and waits > 0:
                op["_waits"] = waits - 1
                if waits == 1:
                    op |= {"status": "DONE", "progress": 100}
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
