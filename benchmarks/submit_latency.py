"""Submit-to-launch latency in the local stack, next to a 5-second polling tick.

Starts the local stack (``corral dev up --detach``) in a temporary state directory, then N
times: submits a one-trial experiment (``POST /experiments``) and waits for the instance
record planned for it to show a ``launched_at``. The stack stamps that field with its own
clock the moment ``RunInstances`` (moto) returned, and ``created_at`` when the schedule pass
wrote the QUEUED record; the client's clock is the same machine's, read just before the
POST. So, per submit:

    plan   = created_at - POST sent     (API -> schedule queue -> schedule pass)
    launch = launched_at - POST sent    (... -> scale-up queue -> RunInstances returned)

Agents never boot during the run (``--boot-delay`` far beyond it), so every submit needs a
new instance and nothing else competes with the measured path. The stack is stopped with
``corral dev down`` at the end, leaving no process behind (checked).

Determined's provisioner instead looks at the demand on a fixed 5-second tick: a submit waits
uniform(0, 5) s for the next tick, 2.5 s on average (median 2.5 s, p95 4.75 s), before its
own work even starts. That figure is computed, not slept.

    .venv/bin/python benchmarks/submit_latency.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from corral.cli.client import ApiClient, Endpoint
from corral.local.state import STATE_ENV, StateDir, pid_alive

POLL_TICK_S = 5.0  # Determined's provisioner interval
WAIT_LIMIT_S = 60.0
# How often the launch is looked for. The figures come from the stack's own timestamps, so
# this sets no resolution; polling faster only loads the stack being measured.
POLL_S = 0.25
CLUSTER = """\
default_resource_pool: bench
resource_pools:
  - name: bench
    provider:
      type: aws
      region: us-east-1
      image_id: ami-0123456789abcdef0
      instance_type: g5.xlarge
      spot: false
      min_instances: 0
      max_instances: {max_instances}
      max_idle_agent_period: 1h
      max_agent_starting_period: 1h
      tag_key: managed-by
      tag_value: corral-bench-latency
"""
EXPERIMENT = """\
name: latency-probe-{n}
entrypoint: python3 -c pass
resources:
  slots_per_trial: 1
"""


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def corral_cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, STATE_ENV: str(state)}
    return subprocess.run(
        [sys.executable, "-m", "corral.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def wait_for_launch(client: ApiClient, known: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while time.monotonic() < deadline:
        for inst in client.get("/agents", {"all": True}).get("instances") or []:
            if inst["id"] not in known and inst.get("launched_at"):
                known.add(inst["id"])
                return dict(inst)
        time.sleep(POLL_S)
    raise RuntimeError(f"no instance launched within {WAIT_LIMIT_S:.0f} s")


def measure(client: ApiClient, runs: int) -> list[tuple[float, float, float]]:
    """(API reply, plan, launch) seconds after the POST, per submit."""
    known = {i["id"] for i in client.get("/agents", {"all": True}).get("instances") or []}
    samples = []
    for n in range(runs):
        sent = time.time()
        client.post("/experiments", {"config": EXPERIMENT.format(n=n)})
        replied = time.time()
        inst = wait_for_launch(client, known)
        sample = (replied - sent, inst["created_at"] - sent, inst["launched_at"] - sent)
        samples.append(sample)
        print(
            f"  submit {n + 1:3}: API reply {sample[0] * 1000:7.1f} ms  "
            f"planned {sample[1] * 1000:7.1f} ms  launched {sample[2] * 1000:7.1f} ms",
            flush=True,
        )
        time.sleep(0.3)  # let the stack settle: each submit starts from a quiet stack
    return samples


def stack_processes(state: StateDir, stack_pid: int | None) -> list[int]:
    pids = [p for p in state.children() if pid_alive(p)]
    if stack_pid is not None and pid_alive(stack_pid):
        pids.append(stack_pid)
    return pids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    print(
        f"submit_latency: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    with tempfile.TemporaryDirectory(prefix="corral-latency-") as tmp:
        root = Path(tmp)
        state = StateDir(root / "dev")
        config = root / "cluster.yaml"
        config.write_text(CLUSTER.format(max_instances=args.runs + 5))
        started = time.monotonic()
        up = corral_cli(
            state.root, "dev", "up", "--detach", "--config", str(config), "--boot-delay", "3600"
        )
        stack_pid = state.stack_pid()
        try:
            if up.returncode != 0:
                print(up.stdout + up.stderr, file=sys.stderr)
                return 1
            print(f"stack up in {time.monotonic() - started:.1f} s ({state.endpoint()})")
            token, url = state.token(), state.endpoint()
            assert token and url
            client = ApiClient(Endpoint(url, token))
            samples = measure(client, args.runs)
        finally:
            down = corral_cli(state.root, "dev", "down", "--force")  # its trials never end
            left = stack_processes(state, stack_pid)
            print(f"stack down: {down.stdout.strip()}; processes left: {left or 'none'}")
        report(samples)
        return 0 if not left else 1


def report(samples: list[tuple[float, float, float]]) -> None:
    columns = list(zip(*samples, strict=True))
    names = ["API reply", "planned (QUEUED record)", "launched (RunInstances)"]
    steady = samples[1:] if len(samples) > 1 else samples
    print(f"\n{len(samples)} submits (the first shown apart; median, p95 and max over the rest):")
    print(f"  {'seconds after the POST':28} {'first':>7} {'median':>7} {'p95':>7} {'max':>7}")
    for name, column, rest in zip(names, columns, zip(*steady, strict=True), strict=True):
        values = list(rest)
        print(
            f"  {name:28} {column[0]:7.3f} {statistics.median(values):7.3f} "
            f"{percentile(values, 0.95):7.3f} {max(values):7.3f}"
        )
    launch = [s[2] for s in steady]
    tick_mean, tick_p95 = POLL_TICK_S / 2, POLL_TICK_S * 0.95
    print(
        f"\n5-second polling tick (Determined's provisioner), the wait for the tick alone,\n"
        f"computed: mean {tick_mean:.2f} s, median {tick_mean:.2f} s, p95 {tick_p95:.2f} s"
    )
    print(
        f"Corral submit -> RunInstances: median {statistics.median(launch):.3f} s, "
        f"p95 {percentile(launch, 0.95):.3f} s\n"
        f"({tick_mean / statistics.median(launch):.1f}x shorter than the tick's mean wait)"
    )


if __name__ == "__main__":
    sys.exit(main())
