"""Corral (fallback on, its default, and off) against the Determined model on the shipped
Alibaba trace and on synthetic Philly- and Helios-like workloads (steady and bursty
arrivals, several seeds each), on two clusters, with the targets of issue 12 checked per
run. Run by ``make bench`` (never by ``make test``); figures go to docs/benchmarks.md.

    .venv/bin/python benchmarks/sim_workloads.py [--config PATH ...] [--seeds 0,1,2]
        [--jobs N] [--no-shipped] [--strict]

Targets (issue 12), for each Corral variant against the Determined model of the same run:
cost <= 0.90 x, wait p95 and wait max no worse, lost GPU-hours at most half.

Exits 0 whatever the checks say (the table is the result); ``--strict`` exits 1 when a
target is missed on any run.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from corral.domain.config import ClusterConfig, load_cluster_config
from corral.sim.metrics import SimMetrics
from corral.sim.runner import simulate
from corral.sim.synthetic import describe, generate
from corral.sim.trace import Trace, TraceFormat, read_trace

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "traces/alibaba-gpu-2023/openb_pod_list_default.csv"
CONFIGS = (REPO / "examples/sim-cluster.yaml", REPO / "benchmarks/sim-one-type.yaml")
MIXES = ("philly", "helios")
ARRIVALS = ("steady", "bursty")
VARIANTS = ("fallback on", "fallback off")


@dataclass(frozen=True)
class Outcome:
    config: str
    workload: str
    seed: int
    corral: dict[str, SimMetrics]  # by variant
    determined: SimMetrics
    wall_s: float

    def checks(self, variant: str) -> list[tuple[str, bool]]:
        c, d = self.corral[variant], self.determined
        return [
            ("cost <= 0.90 x", c.cost_usd <= 0.90 * d.cost_usd),
            ("p95 <=", c.wait_p95_s <= d.wait_p95_s),
            ("max <=", c.wait_max_s <= d.wait_max_s),
            ("lost <= half", c.lost_gpu_hours <= d.lost_gpu_hours / 2),
        ]


def fallback_off(path: Path) -> ClusterConfig:
    """The cluster of ``path`` with ``on_demand_fallback: false`` on every pool."""
    raw = yaml.safe_load(path.read_text())
    for pool in raw["resource_pools"]:
        pool["provider"]["on_demand_fallback"] = False
    return load_cluster_config(yaml.safe_dump(raw)).config


def run(path: Path, name: str, trace: Trace, seed: int) -> Outcome:
    started = time.perf_counter()
    clusters = {"fallback on": load_cluster_config(path).config, "fallback off": fallback_off(path)}
    corral = {v: simulate(clusters[v], trace, "corral", seed)[0] for v in VARIANTS}
    determined, _ = simulate(clusters["fallback on"], trace, "determined", seed)
    wall = time.perf_counter() - started
    return Outcome(path.stem, name, seed, corral, determined, wall)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, action="append", help="cluster config(s)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--jobs", type=int, default=1500, help="jobs per synthetic workload")
    parser.add_argument("--no-shipped", action="store_true", help="skip the Alibaba trace")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    configs = tuple(args.config or CONFIGS)

    print(
        f"# sim_workloads: {', '.join(c.name for c in configs)}, seeds {seeds}, {args.jobs} "
        f"jobs per synthetic workload; {platform.node()} {platform.machine()} "
        f"{platform.python_version()} {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    workloads: list[tuple[str, int, Trace]] = []
    if not args.no_shipped:
        shipped = read_trace(SHIPPED, TraceFormat.ALIBABA_OPENB)
        workloads += [("alibaba (shipped)", seed, shipped) for seed in seeds]
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
                workloads.append((f"{mix}-{arrivals}", seed, trace))

    outcomes = [run(c, name, trace, seed) for c in configs for name, seed, trace in workloads]
    _figures(outcomes)
    _idle(outcomes)
    _targets(outcomes)
    missed = sum(not ok for o in outcomes for v in VARIANTS for _, ok in o.checks(v))
    total = sum(len(o.checks(v)) for o in outcomes for v in VARIANTS)
    print(f"\n{missed} of {total} target checks missed over {len(outcomes)} runs")
    return 1 if args.strict and missed else 0


def _figures(outcomes: list[Outcome]) -> None:
    print("\nFigures; `on / off / d`: Corral fallback on (default), fallback off, Determined.")
    print(
        "| config | workload | seed | cost on / off / d | x d (on / off) | wait p95 s on / off / d "
        "| wait max s on / off / d | idle GPU-h on / off / d | lost GPU-h on / off / d "
        "| on-demand share on | wall s |"
    )
    print("|" + "---|" * 11)
    for o in outcomes:
        on, off, d = o.corral["fallback on"], o.corral["fallback off"], o.determined
        print(
            f"| {o.config} | {o.workload} | {o.seed} "
            f"| {on.cost_usd:,.0f} / {off.cost_usd:,.0f} / {d.cost_usd:,.0f} "
            f"| {on.cost_usd / d.cost_usd:.3f} / {off.cost_usd / d.cost_usd:.3f} "
            f"| {on.wait_p95_s:.0f} / {off.wait_p95_s:.0f} / {d.wait_p95_s:.0f} "
            f"| {on.wait_max_s:.0f} / {off.wait_max_s:.0f} / {d.wait_max_s:.0f} "
            f"| {on.idle_gpu_hours:,.0f} / {off.idle_gpu_hours:,.0f} / {d.idle_gpu_hours:,.0f} "
            f"| {on.lost_gpu_hours:.1f} / {off.lost_gpu_hours:.1f} / {d.lost_gpu_hours:.1f} "
            f"| {on.on_demand_share:.1%} | {o.wall_s:.1f} |"
        )


def _idle(outcomes: list[Outcome]) -> None:
    print("\nIdle GPU-hours by cause (boot / gang / reaping / fragmented), summed over seeds.")
    print("| config | workload | corral, fallback on | determined |")
    print("|---|---|---|---|")
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.config, o.workload), []).append(o)
    for (config, workload), found in groups.items():
        cells = [
            _causes([o.corral["fallback on"] for o in found]),
            _causes([o.determined for o in found]),
        ]
        print(f"| {config} | {workload} | " + " | ".join(cells) + " |")


def _causes(runs: list[SimMetrics]) -> str:
    parts = [
        sum(m.idle_boot_gpu_hours for m in runs),
        sum(m.idle_gang_gpu_hours for m in runs),
        sum(m.idle_reaping_gpu_hours for m in runs),
        sum(m.idle_fragmented_gpu_hours for m in runs),
    ]
    total = sum(parts) or 1.0
    return " / ".join(f"{p:,.0f} ({p / total:.0%})" for p in parts)


def _targets(outcomes: list[Outcome]) -> None:
    labels = [label for label, _ in outcomes[0].checks("fallback on")] if outcomes else []
    print("\nTargets of issue 12 per run (fallback on | fallback off).")
    print("| config | workload | seed | " + " | ".join(labels) + " |")
    print("|---|---|---|" + "---|" * len(labels))
    for o in outcomes:
        on, off = o.checks("fallback on"), o.checks("fallback off")
        cells = [f"{_ok(a)} / {_ok(b)}" for (_, a), (_, b) in zip(on, off, strict=True)]
        print(f"| {o.config} | {o.workload} | {o.seed} | " + " | ".join(cells) + " |")


def _ok(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


if __name__ == "__main__":
    raise SystemExit(main())
