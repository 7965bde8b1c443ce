"""Load on the HTTP API: 1,000 agents heartbeating and a burst of 5,000 trial submissions.

The real resolver (``corral.api.app.build_resolver``) behind the local stack's loopback server
(``corral.local.http_shim.HttpShim``: real HTTP on 127.0.0.1, waitress's poll loop and
worker threads), over the in-memory store, queue and simulated cloud. Clients are threads with
one keep-alive connection each, authenticated like the local stack (bearer tokens; agents'
tokens minted per instance). Phases, each timed on its own:

1. setup (not measured): one 1,000-trial experiment is planned and its 1,000 instances boot;
2. register: each of the 1,000 agents registers (``POST /agents/register``);
3. heartbeat: ``--rounds`` heartbeats per agent, reporting its trial RUNNING;
4. submit burst: ``--experiments`` experiments of ``--trials`` trials each (5,000 trials);
5. baseline: as many ``GET /healthz`` as heartbeats, same clients (no auth, no store).

Requests reach ``--containers`` API instances (1 by default, like the local stack), each
serving one request at a time, as Lambda does.

Each line prints requests, throughput, p50/p99 latency, the ratio of p50 to the baseline's
p50 (the machine is shared and noisy: ratios travel better than milliseconds), 409 answers
(a conditional write lost and the caller was told to retry), conditional-write conflicts
inside the store (``ConflictError`` raised by a commit, most retried by the services), and
errors (any other non-2xx answer or a failed request). The run is bounded: a phase past
``--deadline`` seconds stops and counts the rest as errors. Zero errors is the bar.

    .venv/bin/python benchmarks/load_api.py [--agents 1000] [--rounds 5] [--clients 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import platform
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.services.harness builds the in-memory cluster

from corral.api.app import build_resolver  # noqa: E402
from corral.api.auth import TokenAuthenticator, mint_agent_token  # noqa: E402
from corral.domain.errors import ConflictError  # noqa: E402
from corral.local.http_shim import HttpShim  # noqa: E402
from corral.services.shared.service_context import RandomIds  # noqa: E402
from tests.services.harness import OD_1, Cluster, make_pool  # noqa: E402

USER_TOKEN = "load-user-token"
AGENT_SECRET = b"load-agent-secret"


@dataclass
class Phase:
    name: str
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    conflicts: int = 0  # store-level, counted while the phase ran
    wall_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, status: int, seconds: float) -> None:
        with self.lock:
            self.latencies.append(seconds)
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def errors(self, ok: Sequence[int]) -> int:
        bad = sum(n for s, n in self.statuses.items() if s not in ok and s != 409)
        return bad + len(self.failures)

    def p(self, q: float) -> float:
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(q * len(data)))] * 1000 if data else float("nan")


class CountingConflicts:
    """Counts ConflictError raised by the store's conditional writes (commit)."""

    def __init__(self, store: Any) -> None:
        self.count = 0
        self._lock = threading.Lock()
        original = store.commit

        def commit(records: Any) -> Any:
            try:
                return original(records)
            except ConflictError:
                with self._lock:
                    self.count += 1
                raise

        store.commit = commit


class Client:
    """One keep-alive HTTP connection per thread."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.local = threading.local()

    def request(
        self, method: str, path: str, token: str | None, body: Any = None
    ) -> tuple[int, Any]:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        data = json.dumps(body).encode() if body is not None else None
        try:
            conn.request(method, path, body=data, headers=headers)
            reply = conn.getresponse()
            payload = reply.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            self.local.conn = None
            raise
        return reply.status, json.loads(payload) if payload else None


def run_phase(
    phase: Phase,
    jobs: Sequence[Callable[[], tuple[int, Any]]],
    clients: int,
    deadline_s: float,
    conflicts: CountingConflicts,
) -> list[Any]:
    results: list[Any] = [None] * len(jobs)
    stop_at = time.monotonic() + deadline_s
    before = conflicts.count

    def work(i: int) -> None:
        if time.monotonic() > stop_at:
            with phase.lock:
                phase.failures.append("deadline")
            return
        start = time.perf_counter()
        try:
            status, body = jobs[i]()
        except Exception as exc:  # a failed request is an error of the run, not a crash
            with phase.lock:
                phase.failures.append(repr(exc))
            return
        phase.record(status, time.perf_counter() - start)
        results[i] = body if 200 <= status < 300 else None

    began = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(work, range(len(jobs))))
    phase.wall_s = time.perf_counter() - began
    phase.conflicts = conflicts.count - before
    return results


def boot_agents(cluster: Cluster, agents: int) -> list[str]:
    """Plan one trial per agent and boot every instance (the clock is ours)."""
    cluster.submit(
        name="load-fleet",
        searcher={"name": "grid"},
        hyperparameters={"i": {"type": "int", "minval": 1, "maxval": agents, "count": agents}},
    )
    for _ in range(200):
        cluster.pump(limit=10_000)
        cluster.clock.advance(60)
        running = cluster.running_cloud_ids()
        if len(running) >= agents:
            return sorted(running)[:agents]
    raise SystemExit(f"only {len(cluster.running_cloud_ids())} of {agents} instances booted")


def register_body(cluster: Cluster, cloud_id: str) -> dict[str, Any]:
    return {
        "cloud_id": cloud_id,
        "record_id": cluster.cloud.tags(cloud_id).get("corral-record"),
        "identity": {"kind": "dev", "document": mint_agent_token(AGENT_SECRET, cloud_id)},
        "instance_type": "g.1",
        "zone": "zone-a",
        "private_ip": "10.0.0.5",
        "gpus": [{"index": 0, "uuid": "GPU-0", "name": "fake", "memory_mib": 1024}],
    }


def experiment(i: int, trials: int) -> dict[str, Any]:
    return {
        "client_token": f"load-{i}",
        "config": {
            "name": f"load-{i}",
            "entrypoint": "python train.py",
            "searcher": {"name": "grid"},
            "hyperparameters": {
                "lr": {"type": "double", "minval": 0.001, "maxval": 0.1, "count": trials}
            },
        },
    }


def batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5, help="heartbeats per agent")
    parser.add_argument("--experiments", type=int, default=500)
    parser.add_argument("--trials", type=int, default=10, help="trials per experiment")
    parser.add_argument("--clients", type=int, default=16, help="concurrent client threads")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds per phase")
    parser.add_argument(
        "--containers",
        type=int,
        default=1,
        help="API function instances, each serving one request at a time (as Lambda, and the "
        "local stack's one container: a Powertools resolver keeps the current request on "
        "itself, so one resolver must never serve two requests at once)",
    )
    args = parser.parse_args()

    pool = make_pool(OD_1, max_instances=args.agents + args.experiments * args.trials)
    cluster = Cluster(pool)
    cluster.ctx = dataclasses.replace(cluster.ctx, ids=RandomIds())  # thread-safe ids
    started = time.perf_counter()
    cloud_ids = boot_agents(cluster, args.agents)
    setup_s = time.perf_counter() - started
    conflicts = CountingConflicts(cluster.store)
    auth = TokenAuthenticator({USER_TOKEN: "load"}, agent_secret=AGENT_SECRET)
    idle: queue.Queue[Any] = queue.Queue()
    for _ in range(args.containers):
        idle.put(build_resolver(lambda: cluster.ctx, auth))

    def invoke(event: dict[str, Any]) -> Any:
        resolver = idle.get()  # waits, as a request waits for a free container
        try:
            return resolver.resolve(event, None)
        finally:
            idle.put(resolver)

    shim = HttpShim(invoke)
    shim.start()
    client = Client(shim.port)
    tokens = {c: mint_agent_token(AGENT_SECRET, c) for c in cloud_ids}
    phases: list[tuple[Phase, tuple[int, ...]]] = []
    try:
        reg = Phase("register")
        replies = run_phase(
            reg,
            [
                (
                    lambda c=c: client.request(
                        "POST", "/agents/register", tokens[c], register_body(cluster, c)
                    )
                )
                for c in cloud_ids
            ],
            args.clients,
            args.deadline,
            conflicts,
        )
        phases.append((reg, (200,)))
        agent_ids = {c: r["agent_id"] for c, r in zip(cloud_ids, replies, strict=True) if r}
        cluster.pump(limit=10_000)  # registrations woke the scheduler: trials get assigned

        running: dict[str, list[dict[str, Any]]] = {c: [] for c in agent_ids}

        def beat(c: str) -> tuple[int, Any]:
            status, body = client.request(
                "POST", f"/agents/{agent_ids[c]}/heartbeat", tokens[c], {"trials": running[c]}
            )
            if status != 200:
                with hb.lock:
                    hb.failures.append(f"{status}: {json.dumps(body)[:200]}")
            if status == 200:
                for start in body["start"]:
                    running[c].append({"trial_id": start["trial_id"], "state": "running"})
            return status, body

        hb = Phase("heartbeat")
        jobs = [(lambda c=c: beat(c)) for _ in range(args.rounds) for c in agent_ids]
        run_phase(hb, jobs, args.clients, args.deadline, conflicts)
        phases.append((hb, (200,)))

        sub = Phase("submit burst")
        run_phase(
            sub,
            [
                (
                    lambda i=i: client.request(
                        "POST", "/experiments", USER_TOKEN, experiment(i, args.trials)
                    )
                )
                for i in range(args.experiments)
            ],
            args.clients,
            args.deadline,
            conflicts,
        )
        phases.append((sub, (200, 201)))
        trials = sum(1 for t in cluster.store.trials() if t.experiment_id and t.pool)
        base = Phase("baseline /healthz")
        run_phase(
            base,
            [(lambda: client.request("GET", "/healthz", None)) for _ in range(len(jobs))],
            args.clients,
            args.deadline,
            conflicts,
        )
        phases.append((base, (200,)))
    finally:
        shim.stop()

    base_p50 = base.p(0.5)
    server = "as in the local stack (waitress: TCP_NODELAY, backlog 1024)"
    print(f"python {platform.python_version()}, {platform.machine()}, setup {setup_s:.1f} s")
    print(f"loopback server {server}")
    print(
        f"agents {len(agent_ids)}, clients {args.clients}, API containers {args.containers}, "
        f"trials stored {trials}"
    )
    header = f"{'phase':<18}{'requests':>9}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}"
    print(header + f"{'p50/base':>9}{'409s':>6}{'conflicts':>10}{'errors':>7}")
    total_errors = 0
    for phase, ok in phases:
        n = len(phase.latencies)
        errors = phase.errors(ok)
        total_errors += errors
        rate = n / phase.wall_s
        print(
            f"{phase.name:<18}{n:>9}{rate:>8.0f}{phase.p(0.5):>8.1f}{phase.p(0.99):>8.1f}"
            f"{phase.p(0.5) / base_p50:>9.1f}{phase.statuses.get(409, 0):>6}{phase.conflicts:>10}"
            f"{errors:>7}"
        )
        for failure in sorted(set(phase.failures))[:3]:
            print(f"  failure: {failure}")
        for status, count in sorted(phase.statuses.items()):
            if status not in ok and status != 409:
                print(f"  status {status}: {count}")
    print(
        f"submit burst: {args.experiments * args.trials:,} trials in {sub.wall_s:.1f} s "
        f"({args.experiments * args.trials / sub.wall_s:.0f} trials/s)"
    )
    return 1 if total_errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
