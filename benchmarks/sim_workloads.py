"""Corral (fallback on, its default, and off; each also with a warm pool, and with a warm
pool and ``consolidate``) against the Determined model on the shipped Alibaba trace and on
synthetic Philly- and Helios-like workloads (steady and bursty arrivals, several seeds
each), on two clusters, with the targets of issue 12 checked per run. Run by ``make
bench`` (never by ``make test``); figures go to docs/benchmarks.md.

    .venv/bin/python benchmarks/sim_workloads.py [--config PATH ...] [--seeds 0,1,2]
        [--jobs N] [--no-shipped] [--strict] [--processes N]

Targets (issue 12), for each Corral variant against the Determined model of the same run:
cost <= 0.90 x, wait p95 and wait max no worse, lost GPU-hours at most half. Last, every
cost of a run as a multiple of its packing bound (``corral.sim.bounds``: the least a policy
that starts every job on arrival pays); a cost target below 1.000 x is out of reach for such
a policy on that run.

Exits 0 whatever the checks say (the table is the result); ``--strict`` exits 1 when a
target is missed on any run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from cluster_variants import variant

from corral.domain.config import load_cluster_config
from corral.sim.bounds import packing_bound_usd
from corral.sim.metrics import SimMetrics
from corral.sim.runner import simulate
from corral.sim.synthetic import describe, generate
from corral.sim.trace import Trace, TraceFormat, read_trace

REPO = Path(__file__).resolve().parents[1]
R = TypeVar("R")
SHIPPED = REPO / "traces/alibaba-gpu-2023/openb_pod_list_default.csv"
CONFIGS = (REPO / "examples/sim-cluster.yaml", REPO / "benchmarks/sim-one-type.yaml")
MIXES = ("philly", "helios")
ARRIVALS = ("steady", "bursty")
# Corral's variants: (label, on_demand_fallback, consolidate, warm pool). The first is the
# default config; +w adds a warm pool, +cw a warm pool and consolidation.
VARIANTS = (
    ("on", True, False, False),
    ("off", False, False, False),
    ("on+w", True, False, True),
    ("off+w", False, False, True),
    ("on+cw", True, True, True),
    ("off+cw", False, True, True),
)
LABELS = tuple(label for label, *_ in VARIANTS)
TARGET = 0.90  # issue 12: Corral's cost at most this times the Determined model's


@dataclass(frozen=True)
class Outcome:
    config: str
    workload: str
    seed: int
    corral: dict[str, SimMetrics]  # by variant label
    determined: SimMetrics
    wall_s: float
    # The least a policy that starts every job on arrival pays (corral.sim.bounds).
    packing_usd: float

    def checks(self, variant: str) -> list[tuple[str, bool]]:
        c, d = self.corral[variant], self.determined
        return [
            ("cost <= 0.90 x", c.cost_usd <= TARGET * d.cost_usd),
            ("p95 <=", c.wait_p95_s <= d.wait_p95_s),
            ("max <=", c.wait_max_s <= d.wait_max_s),
            ("lost <= half", c.lost_gpu_hours <= d.lost_gpu_hours / 2),
        ]


def run(path: Path, name: str, trace: Trace, seed: int) -> Outcome:
    started = time.perf_counter()
    corral = {
        label: simulate(
            variant(path, fallback=fallback, consolidate=consolidate, warm=warm),
            trace,
            "corral",
            seed,
        )[0]
        for label, fallback, consolidate, warm in VARIANTS
    }
    cluster = load_cluster_config(path).config
    determined, replay = simulate(cluster, trace, "determined", seed)
    wall = time.perf_counter() - started
    # The jobs as replayed (the replay drops what no offering can hold), on every offering
    # the config allows, as the oracle prices them.
    offerings = [o for pool in cluster.resource_pools for o in pool.offerings()]
    packing = packing_bound_usd([r.job for r in replay.jobs], offerings)
    return Outcome(path.stem, name, seed, corral, determined, wall, packing)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, action="append", help="cluster config(s)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--jobs", type=int, default=1500, help="jobs per synthetic workload")
    parser.add_argument("--no-shipped", action="store_true", help="skip the Alibaba trace")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--processes", type=int, default=1, help="runs in parallel")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    configs = tuple(args.config or CONFIGS)

    print(
        f"# sim_workloads: {', '.join(c.name for c in configs)}, seeds {seeds}, {args.jobs} "
        f"jobs per synthetic workload; {platform.node()} {platform.machine()} "
        f"{platform.python_version()} {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    workloads = build_workloads(seeds, args.jobs, shipped=not args.no_shipped, verbose=True)
    jobs = [(c, name, trace, seed) for c in configs for name, seed, trace in workloads]
    outcomes = run_parallel(run, jobs, args.processes)
    _figures(outcomes)
    _idle(outcomes)
    _targets(outcomes)
    _bounds(outcomes)
    missed = sum(not ok for o in outcomes for v in LABELS for _, ok in o.checks(v))
    total = sum(len(o.checks(v)) for o in outcomes for v in LABELS)
    print(f"\n{missed} of {total} target checks missed over {len(outcomes)} runs")
    return 1 if args.strict and missed else 0


def build_workloads(
    seeds: list[int], jobs: int, *, shipped: bool = True, verbose: bool = False
) -> list[tuple[str, int, Trace]]:
    """(name, seed, trace) of every workload: the shipped trace once per seed (the seed picks
    the cloud's draws), then each synthetic mix and arrival pattern per seed."""
    workloads: list[tuple[str, int, Trace]] = []
    if shipped:
        trace = read_trace(SHIPPED, TraceFormat.ALIBABA_OPENB)
        workloads += [("alibaba (shipped)", seed, trace) for seed in seeds]
    for mix in MIXES:
        for arrivals in ARRIVALS:
            for seed in seeds:
                trace = generate(mix, seed=seed, jobs=jobs, arrivals=arrivals)
                if verbose:
                    stats = describe(trace)
                    print(
                        f"# {mix}-{arrivals} seed {seed}: median {stats['median_s']:,.0f} s, "
                        f"mean {stats['mean_s']:,.0f} s, mean GPUs {stats['mean_gpus']:.2f}, "
                        f"submissions over {stats['span_s'] / 86400:.1f} days"
                    )
                workloads.append((f"{mix}-{arrivals}", seed, trace))
    return workloads


def run_parallel(fn: Callable[..., R], jobs: list[tuple[Any, ...]], processes: int) -> list[R]:
    """``fn(*job)`` for every job, in ``processes`` forked workers when more than one."""
    if processes > 1:
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            return pool.starmap(fn, jobs)
    return [fn(*job) for job in jobs]


def _figures(outcomes: list[Outcome]) -> None:
    names = " / ".join(LABELS)
    print(
        f"\nFigures; `{names} / d`: Corral with fallback on (the default) and off, each "
        "alone, with a warm pool (+w) and with a warm pool and `consolidate` (+cw), then the "
        "Determined model. Cost includes the stopped instances' disks."
    )
    print(
        f"| config | workload | seed | cost {names} / d | x d ({names}) | wait p95 s {names} / d "
        f"| wait max s {names} / d | idle GPU-h {names} / d | lost GPU-h {names} / d "
        f"| restart GPU-h {names} / d | on-demand share {names} | wall s |"
    )
    print("|" + "---|" * 13)
    for o in outcomes:
        runs = [o.corral[v] for v in LABELS]
        d = o.determined
        every = [*runs, d]

        def cells(fmt: str, field: str, every: list[SimMetrics] = every) -> str:
            return " / ".join(format(getattr(m, field), fmt) for m in every)

        ratios = " / ".join(f"{m.cost_usd / d.cost_usd:.3f}" for m in runs)
        shares = " / ".join(f"{m.on_demand_share:.1%}" for m in runs)
        print(
            f"| {o.config} | {o.workload} | {o.seed} | {cells(',.0f', 'cost_usd')} | {ratios} "
            f"| {cells('.0f', 'wait_p95_s')} | {cells('.0f', 'wait_max_s')} "
            f"| {cells(',.0f', 'idle_gpu_hours')} | {cells('.1f', 'lost_gpu_hours')} "
            f"| {cells('.1f', 'restart_gpu_hours')} | {shares} | {o.wall_s:.1f} |"
        )


def _idle(outcomes: list[Outcome]) -> None:
    print("\nIdle GPU-hours by cause (boot / gang / reaping / fragmented), summed over seeds.")
    print("| config | workload | corral on | corral on+w | corral on+cw | determined |")
    print("|---|---|---|---|---|---|")
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.config, o.workload), []).append(o)
    for (config, workload), found in groups.items():
        cells = [
            _causes([o.corral["on"] for o in found]),
            _causes([o.corral["on+w"] for o in found]),
            _causes([o.corral["on+cw"] for o in found]),
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
    labels = [label for label, _ in outcomes[0].checks(LABELS[0])] if outcomes else []
    print(f"\nTargets of issue 12 per run ({' / '.join(LABELS)}).")
    print("| config | workload | seed | " + " | ".join(labels) + " |")
    print("|---|---|---|" + "---|" * len(labels))
    for o in outcomes:
        checks = [o.checks(v) for v in LABELS]
        cells = [" / ".join(_ok(c[i][1]) for c in checks) for i in range(len(labels))]
        print(f"| {o.config} | {o.workload} | {o.seed} | " + " | ".join(cells) + " |")
    print("\nPassed per variant (of runs):")
    for v in LABELS:
        per = [sum(o.checks(v)[i][1] for o in outcomes) for i in range(len(labels))]
        every = sum(all(ok for _, ok in o.checks(v)) for o in outcomes)
        row = ", ".join(f"{label} {n}" for label, n in zip(labels, per, strict=True))
        print(f"  {v:7} {row}; all four {every} of {len(outcomes)}")


def _bounds(outcomes: list[Outcome]) -> None:
    """Each run's costs as multiples of its packing bound: 1.000 is the least a policy that
    starts every job on arrival pays."""
    print(
        "\nCosts x the packing bound (the oracle's GPUs bought one at a time; the target is "
        "0.90 x the model's cost)."
    )
    print(
        "| config | workload | seed | model USD | oracle x | model x | target (0.90 x model) x "
        "| Corral default x | Corral on+cw x |"
    )
    print("|" + "---|" * 9)
    for o in outcomes:
        d, p = o.determined, o.packing_usd
        print(
            f"| {o.config} | {o.workload} | {o.seed} | {d.cost_usd:,.0f} "
            f"| {d.oracle_cost_usd / p:.3f} | {d.cost_usd / p:.3f} | {TARGET * d.cost_usd / p:.3f} "
            f"| {o.corral['on'].cost_usd / p:.3f} | {o.corral['on+cw'].cost_usd / p:.3f} |"
        )
    out_of_reach = sum(TARGET * o.determined.cost_usd < o.packing_usd for o in outcomes)
    print(
        f"\nThe cost target is below the packing bound (out of reach for any policy that "
        f"starts jobs on arrival) on {out_of_reach} of {len(outcomes)} runs."
    )
    for config in sorted({o.config for o in outcomes}):
        room = [o.determined.cost_usd / o.packing_usd for o in outcomes if o.config == config]
        print(
            f"  {config}: the model pays {min(room):.3f} to {max(room):.3f} x the packing "
            f"bound; target / packing {min(room) * TARGET:.3f} to {max(room) * TARGET:.3f}"
        )


def _ok(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


if __name__ == "__main__":
    raise SystemExit(main())
