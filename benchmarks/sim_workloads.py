"""Both policies on the shipped Alibaba trace and on synthetic Philly- and Helios-like
workloads (steady and bursty arrivals, a couple of seeds each), same cluster and cloud model,
with the targets of issue 6 checked per workload. Run by ``make bench`` (never by
``make test``); figures go to docs/benchmarks.md.

    .venv/bin/python benchmarks/sim_workloads.py [--config PATH] [--seeds 0,1] [--jobs N]
        [--no-shipped] [--strict]

Exits 0 whatever the checks say (the table is the result); ``--strict`` exits 1 when a
target is missed on any workload.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from corral.domain.config import ClusterConfig, load_cluster_config
from corral.sim.metrics import SimMetrics
from corral.sim.runner import POLICIES, simulate
from corral.sim.synthetic import describe, generate
from corral.sim.trace import Trace, TraceFormat, read_trace

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO.parent / "shared/traces/alibaba-gpu-2023/openb_pod_list_default.csv"
CONFIG = REPO / "examples/sim-cluster.yaml"
MIXES = ("philly", "helios")
ARRIVALS = ("steady", "bursty")


@dataclass(frozen=True)
class Outcome:
    workload: str
    seed: int
    corral: SimMetrics
    determined: SimMetrics
    boot_mean_s: float
    wall_s: float

    def checks(self) -> list[tuple[str, bool]]:
        c, d = self.corral, self.determined
        limit = self.boot_mean_s + 60
        return [
            ("cost <= 0.95 x determined", c.cost_usd <= 0.95 * d.cost_usd),
            ("cost_ratio <= 1.20", c.cost_ratio <= 1.20),
            (f"wait_p95 <= boot + 60 ({limit:.0f} s)", c.wait_p95_s <= limit),
            ("wait_p95 <= determined's", c.wait_p95_s <= d.wait_p95_s),
            ("lost <= half determined's", c.lost_gpu_hours <= d.lost_gpu_hours / 2),
        ]


def run(cluster: ClusterConfig, name: str, trace: Trace, seed: int) -> Outcome:
    started = time.perf_counter()
    results: dict[str, SimMetrics] = {}
    boot = 0.0
    for policy in POLICIES:
        metrics, replay = simulate(cluster, trace, policy, seed)
        results[policy] = metrics
        boot = replay.boot_mean_s
    wall = time.perf_counter() - started
    return Outcome(name, seed, results["corral"], results["determined"], boot, wall)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    parser.add_argument("--jobs", type=int, default=1500, help="jobs per synthetic workload")
    parser.add_argument("--no-shipped", action="store_true", help="skip the Alibaba trace")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    cluster = load_cluster_config(args.config).config

    print(
        f"# sim_workloads: {args.config.name}, seeds {seeds}, {args.jobs} jobs per synthetic "
        f"workload; {platform.node()} {platform.machine()} {platform.python_version()} "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    outcomes: list[Outcome] = []
    if not args.no_shipped and SHIPPED.exists():
        outcomes.append(
            run(cluster, "alibaba (shipped)", read_trace(SHIPPED, TraceFormat.ALIBABA_OPENB), 0)
        )
    for mix in MIXES:
        for arrivals in ARRIVALS:
            for seed in seeds:
                trace = generate(mix, seed=seed, jobs=args.jobs, arrivals=arrivals)
                stats = describe(trace)
                print(
                    f"# {mix}-{arrivals} seed {seed}: median {stats['median_s']:,.0f} s, "
                    f"mean {stats['mean_s']:,.0f} s, mean GPUs {stats['mean_gpus']:.2f}, "
                    f"submissions over {stats['span_s'] / 86400:.1f} days"
                )
                outcomes.append(run(cluster, f"{mix}-{arrivals}", trace, seed))

    _figures(outcomes)
    _targets(outcomes)
    missed = sum(not ok for o in outcomes for _, ok in o.checks())
    print(f"\n{missed} target(s) missed over {len(outcomes)} workload run(s)")
    return 1 if args.strict and missed else 0


def _figures(outcomes: list[Outcome]) -> None:
    print()
    header = (
        "| workload | seed | cost corral | cost determined | x determined | cost_ratio c / d "
        "| wait_p95_s c / d | wait_max_s c / d | idle GPU-h c / d | lost GPU-h c / d "
        "| launched c / d | wall s |"
    )
    print(header)
    print("|" + "---|" * 12)
    for o in outcomes:
        c, d = o.corral, o.determined
        print(
            f"| {o.workload} | {o.seed} | {c.cost_usd:,.0f} | {d.cost_usd:,.0f} "
            f"| {c.cost_usd / d.cost_usd:.3f} | {c.cost_ratio:.3f} / {d.cost_ratio:.3f} "
            f"| {c.wait_p95_s:.0f} / {d.wait_p95_s:.0f} | {c.wait_max_s:.0f} / {d.wait_max_s:.0f} "
            f"| {c.idle_gpu_hours:,.0f} / {d.idle_gpu_hours:,.0f} "
            f"| {c.lost_gpu_hours:.1f} / {d.lost_gpu_hours:.1f} "
            f"| {c.instances_launched} / {d.instances_launched} | {o.wall_s:.1f} |"
        )


def _targets(outcomes: list[Outcome]) -> None:
    print()
    labels = [label.split(" (")[0] for label, _ in outcomes[0].checks()] if outcomes else []
    print("| workload | seed | " + " | ".join(labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    for o in outcomes:
        cells = ["PASS" if ok else "FAIL" for _, ok in o.checks()]
        print(f"| {o.workload} | {o.seed} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
