"""Fakes for the agent tests: a control plane and a metadata server on loopback (stdlib
``http.server`` in threads), and a clock the tests move by hand."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agent_runtime.agent import Agent
from agent_runtime.config import AgentConfig
from agent_runtime.main import build_agent
from tests.fakes.http import QuietHandler, send, send_json


class FakeClock:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


class FakeSleeper:
    """Sleeping moves the fake clock: retries and backoff cost no real time."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.advance(seconds)

    def wake(self) -> None:
        pass


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    ).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}"


@dataclass
class FakeControlPlane:
    """Records every request; replies as scripted. ``down`` makes it answer 503."""

    requests: list[Recorded] = field(default_factory=list)
    register_reply: dict[str, Any] = field(
        default_factory=lambda: {
            "agent_id": "rec-1",
            "heartbeat_interval_s": 5.0,
            "log_batch_max_lines": 500,
            "dead_man_switch_s": 600.0,
        }
    )
    register_status: int = 200
    # Path suffix ("/status", "/logs", "/heartbeat") -> (status, message) to refuse with.
    refusals: dict[str, tuple[int, str]] = field(default_factory=dict)
    heartbeat_replies: list[dict[str, Any]] = field(default_factory=list)
    down: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    server: ThreadingHTTPServer | None = None

    def start(self) -> FakeControlPlane:
        plane = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                body = json.loads(raw) if raw else None
                with plane.lock:
                    plane.requests.append(
                        Recorded("POST", self.path, dict(self.headers.items()), body)
                    )
                    status, reply = plane.reply(self.path, body)
                send_json(self, status, reply)

        self.server, self.url = _serve(Handler)
        return self

    def reply(self, path: str, body: Any) -> tuple[int, Any]:
        if self.down:
            return 503, {"message": "down"}
        for suffix, (status, message) in self.refusals.items():
            if path.endswith(suffix):
                return status, {"message": message}
        if path == "/agents/register":
            if self.register_status != 200:
                return self.register_status, {"message": "refused"}
            return 200, self.register_reply
        if path.endswith("/heartbeat"):
            return 200, self.heartbeat_replies.pop(0) if self.heartbeat_replies else {}
        if path.endswith("/logs"):
            return 200, {"accepted": len(body["lines"])}
        return 200, {}

    def posts(self, suffix: str) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.path.endswith(suffix)]

    def statuses(self, trial_id: str) -> list[dict[str, Any]]:
        """Every status the server heard for a trial, from status posts and heartbeats."""
        out = []
        with self.lock:
            for r in self.requests:
                if r.path.endswith(f"/trials/{trial_id}/status"):
                    out.append(r.body)
                elif r.path.endswith("/heartbeat"):
                    out.extend(t for t in r.body["trials"] if t["trial_id"] == trial_id)
        return out

    def log_lines(self, trial_id: str) -> list[str]:
        lines = [x for r in self.posts(f"/trials/{trial_id}/logs") for x in r.body["lines"]]
        return [x["line"] for x in sorted(lines, key=lambda x: x["seq"])]


@dataclass
class FakeMetadata:
    """IMDSv2 (token PUT, then token-checked GETs) and the GCE metadata server (needs the
    ``Metadata-Flavor: Google`` header), both from one path -> value table."""

    values: dict[str, str] = field(default_factory=dict)
    token: str = "imds-token-1"
    seen: list[Recorded] = field(default_factory=list)
    url: str = ""
    server: ThreadingHTTPServer | None = None

    def start(self) -> FakeMetadata:
        meta = self

        class Handler(QuietHandler):
            def _send(self, status: int, text: str) -> None:
                send(self, status, text.encode())

            def do_PUT(self) -> None:
                meta.seen.append(Recorded("PUT", self.path, dict(self.headers.items()), None))
                if self.path == "/latest/api/token" and self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds"
                ):
                    self._send(200, meta.token)
                else:
                    self._send(400, "bad token request")

            def do_GET(self) -> None:
                meta.seen.append(Recorded("GET", self.path, dict(self.headers.items()), None))
                path = self.path
                ec2 = path.startswith("/latest/")
                if ec2 and self.headers.get("X-aws-ec2-metadata-token") != meta.token:
                    self._send(401, "")
                    return
                gce = path.startswith("/computeMetadata/")
                if gce and self.headers.get("Metadata-Flavor") != "Google":
                    self._send(403, "missing Metadata-Flavor")
                    return
                key = path.split("?", 1)[0]
                if key in meta.values:
                    self._send(200, meta.values[key])
                else:
                    self._send(404, "")

        self.server, self.url = _serve(Handler)
        return self


EC2_DOCUMENT = json.dumps(
    {"instanceId": "i-0abc", "region": "us-east-1", "instanceType": "g5.12xlarge"}
)


def ec2_values() -> dict[str, str]:
    m = "/latest/meta-data/"
    return {
        m + "instance-id": "i-0abc",
        m + "instance-type": "g5.12xlarge",
        m + "placement/availability-zone": "us-east-1b",
        m + "instance-life-cycle": "spot",
        m + "local-ipv4": "10.0.0.7",
        "/latest/dynamic/instance-identity/document": EC2_DOCUMENT,
        "/latest/dynamic/instance-identity/pkcs7": "PKCS7SIGNATURE",
    }


Fake = TypeVar("Fake", FakeControlPlane, FakeMetadata)


def _serving(fake: Fake) -> Iterator[Fake]:
    """``fake`` serving on loopback for one test, then shut down."""
    started = fake.start()
    yield started
    assert started.server is not None
    started.server.shutdown()
    started.server.server_close()


@pytest.fixture
def plane() -> Iterator[FakeControlPlane]:
    yield from _serving(FakeControlPlane())


@pytest.fixture
def metadata() -> Iterator[FakeMetadata]:
    yield from _serving(FakeMetadata())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@dataclass
class Harness:
    agent: Agent
    clock: FakeClock
    plane: FakeControlPlane
    shutdowns: list[list[str]]

    def step_until(
        self, cond: Callable[[], bool], advance: float = 1.0, timeout: float = 5.0
    ) -> None:
        """Step the agent, moving the fake clock, until ``cond`` holds. Real time passes only
        in tiny waits for the trial subprocess and the loopback servers."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached in time")
            self.agent.run_once()
            self.clock.advance(advance)
            time.sleep(0.01)


def dev_config(**settings: Any) -> AgentConfig:
    """A dev-mode agent config (fixed token and instance id, no control plane behind
    ``api_url``) with ``settings`` on top: for what the config alone decides."""
    return AgentConfig(
        api_url="http://cp",
        dev_token="t",  # type: ignore[arg-type]
        dev_instance_id="i-1",
        **settings,
    )


@pytest.fixture
def make_agent(
    plane: FakeControlPlane, clock: FakeClock, tmp_path: Path
) -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(**overrides: Any) -> Harness:
        settings: dict[str, Any] = {
            "api_url": plane.url,
            "auth": "dev",
            "dev_token": "dev-secret",
            "dev_instance_id": "i-dev",
            "fake_gpus": 2,
            "expected_gpus": 2,
            "executor": "process",
            "work_dir": str(tmp_path / "work"),
            "agent_reconnect_attempts": 0,
            "agent_reconnect_backoff": 0.5,
            "shutdown_command": ["fake-shutdown"],
            "request_timeout_s": 2.0,
            # Any free port: tests run side by side (docs/security.md, "Trial credentials").
            "trial_credentials_port": 0,
        }
        settings.update(overrides)
        shutdowns: list[list[str]] = []

        def runner(command: list[str]) -> int:
            shutdowns.append(command)
            return 0

        config = AgentConfig.model_validate(settings)
        agent = build_agent(config, clock, FakeSleeper(clock), shutdown_runner=runner)
        made.append(Harness(agent, clock, plane, shutdowns))
        return made[-1]

    yield make
    for harness in made:  # no trial subprocess outlives its test
        for run in harness.agent.trials.values():
            run.stop(run.state, 0, 0)
            run.kill_now()
        if harness.agent.credentials is not None:  # nor a credentials listener
            harness.agent.credentials.close()


def trial_script(tmp_path: Path, body: str, name: str = "trial.py") -> list[str]:
    path = tmp_path / name
    path.write_text(body)
    return [sys.executable, "-u", str(path)]


def assignment(trial_id: str, entrypoint: list[str], **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "trial_id": trial_id,
        "experiment_id": "exp-1",
        "entrypoint": entrypoint,
        "gpus": [1],
        "hyperparameters": {"lr": 0.1, "layers": 4},
        "checkpoint": {"storage_uri": "s3://bucket/exp-1/" + trial_id},
    }
    out.update(extra)
    return out
