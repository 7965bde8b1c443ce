"""Replay the shipped Alibaba trace under Corral (fallback on, its default, and off, and with
``consolidate``) and the Determined model, side by side, with the targets of issues 6 and 12
checked. Run by ``make bench`` (never by ``make test``); figures go to docs/benchmarks.md.

    .venv/bin/python benchmarks/sim_policies.py [--trace PATH] [--config PATH] [--seed N]
"""

from __future__ import annotations

import argparse
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

from cluster_variants import variant

from corral.sim.metrics import SimMetrics
from corral.sim.runner import simulate
from corral.sim.trace import TraceFormat, read_trace

# Column -> (policy, on_demand_fallback, consolidate).
# column -> (policy, on_demand_fallback, consolidate, warm pool)
COLUMNS = {
    "corral": ("corral", True, False, False),
    "corral no-fb": ("corral", False, False, False),
    "corral +w": ("corral", True, False, True),
    "corral +cw": ("corral", True, True, True),
    "determined": ("determined", True, False, False),
}

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "traces/alibaba-gpu-2023/openb_pod_list_default.csv"
CONFIG = REPO / "examples/sim-cluster.yaml"
TIME_LIMIT_S = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()

    trace = read_trace(args.trace, TraceFormat.ALIBABA_OPENB)
    results: dict[str, SimMetrics] = {}
    seconds: dict[str, float] = {}
    boot_mean = 0.0
    for column, (policy, fallback, consolidate, warm) in COLUMNS.items():
        started = time.perf_counter()
        cluster = variant(args.config, fallback=fallback, consolidate=consolidate, warm=warm)
        metrics, replay = simulate(cluster, trace, policy, args.seed)
        seconds[column] = time.perf_counter() - started
        results[column] = metrics
        boot_mean = replay.boot_mean_s

    print(
        f"# sim_policies: {args.trace.name}, {len(trace.jobs)} jobs replayed, seed "
        f"{args.seed if args.seed is not None else 'from config'}"
    )
    print(
        f"# {platform.node()} {platform.machine()} {platform.python_version()} "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    keys = list(results["corral"].as_dict())
    print(f"| {'figure':<25} | " + " | ".join(f"{p:>12}" for p in COLUMNS) + " |")
    print(f"|{'-' * 27}|" + "|".join("-" * 14 for _ in COLUMNS) + "|")
    for key in keys[1:]:
        cells = [_fmt(results[p].as_dict()[key], key) for p in COLUMNS]
        print(f"| {key:<25} | " + " | ".join(f"{c:>12}" for c in cells) + " |")
    print(
        f"| {'replay_wall_s':<25} | " + " | ".join(f"{seconds[p]:>12.1f}" for p in COLUMNS) + " |"
    )

    d = results["determined"]
    checks: list[tuple[str, bool]] = []
    for column in (c for c in COLUMNS if c != "determined"):
        c = results[column]
        checks += [
            (f"{column} cost_ratio <= 1.20", c.cost_ratio <= 1.20),
            (
                f"{column} wait_p95_s <= mean boot + 60 ({boot_mean + 60:.0f} s)",
                c.wait_p95_s <= boot_mean + 60,
            ),
            (f"{column} cost_usd <= 0.90 x determined", c.cost_usd <= 0.90 * d.cost_usd),
            (f"{column} wait_p95_s <= determined's", c.wait_p95_s <= d.wait_p95_s),
            (f"{column} wait_max_s <= determined's", c.wait_max_s <= d.wait_max_s),
            (
                f"{column} lost_gpu_hours <= half determined's",
                c.lost_gpu_hours <= d.lost_gpu_hours / 2,
            ),
        ]
    checks += [(f"{p} replay < {TIME_LIMIT_S:.0f} s", seconds[p] < TIME_LIMIT_S) for p in COLUMNS]
    print()
    for label, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {label}")
    return 0 if all(ok for _, ok in checks) else 1


def _fmt(value: object, key: str) -> str:
    if key == "on_demand_share" and isinstance(value, float):
        return f"{value:.1%}"
    if key == "cost_ratio" and isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


if __name__ == "__main__":
    raise SystemExit(main())
