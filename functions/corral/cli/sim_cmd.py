"""``corral sim``: replay a workload trace through the real services on a simulated cloud.

Output contract (tested): a readable table on stdout, or with ``--json`` one JSON object with
exactly the keys of ``SimMetrics``. Bad input (a trace, config or simulation block that
cannot be used, an unwritable plot) prints one ``where: what`` line per problem on stderr and
exits 2; never a traceback.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from corral.domain.catalog import PRICES_AS_OF
from corral.domain.config import ConfigError, load_cluster_config

EXIT_INVALID = 2
EXIT_INTERNAL = 1

app = typer.Typer(help="Replay a workload trace on a simulated cloud.")


class Format(StrEnum):
    CANONICAL = "canonical"
    ALIBABA_OPENB = "alibaba-openb"
    # Generated, not read: no --trace (corral.sim.synthetic).
    SYNTHETIC_PHILLY = "synthetic-philly"
    SYNTHETIC_HELIOS = "synthetic-helios"


class ArrivalsName(StrEnum):
    STEADY = "steady"
    BURSTY = "bursty"


class PolicyName(StrEnum):
    CORRAL = "corral"
    DETERMINED = "determined"


def _fail(lines: list[str]) -> typer.Exit:
    for line in lines:
        typer.echo(line, err=True)
    return typer.Exit(EXIT_INVALID)


@app.callback(invoke_without_command=True)
def sim(
    config: Annotated[
        Path, typer.Option("--config", help="Cluster config (its simulation: block is the cloud).")
    ],
    trace: Annotated[
        Path | None, typer.Option("--trace", help="The trace CSV to replay (file formats).")
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", help="Trace format.")] = Format.CANONICAL,
    jobs_wanted: Annotated[
        int,
        typer.Option(
            "--jobs", min=1, help="Jobs to generate (synthetic formats), at most 200,000."
        ),
    ] = 1500,
    arrivals: Annotated[
        ArrivalsName, typer.Option("--arrivals", help="Arrival pattern (synthetic formats).")
    ] = ArrivalsName.STEADY,
    policy: Annotated[
        PolicyName, typer.Option("--policy", help="Corral's policy or the Determined model.")
    ] = PolicyName.CORRAL,
    seed: Annotated[int | None, typer.Option("--seed", help="Overrides simulation.seed.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    plot_file: Annotated[
        Path | None,
        typer.Option("--plot", help="Write GPUs over time and waits (FILE.png, .svg, .pdf, ...)."),
    ] = None,
) -> None:
    """Replay TRACE on the cluster of CONFIG and print cost, waits and losses."""
    from corral.sim.model import simulation_config
    from corral.sim.runner import simulate
    from corral.sim.synthetic import MAX_JOBS
    from corral.sim.trace import TraceError, TraceFormat, describe_skipped, read_trace

    try:
        cluster = load_cluster_config(config).config
        sim_config = simulation_config(cluster.simulation, cluster)
    except ConfigError as exc:
        raise _fail([f"{p.path or config}: {p.reason}" for p in exc.problems]) from None
    # Usage problems first: a simulation can run for minutes before it would meet them.
    usage: list[str] = []
    if jobs_wanted > MAX_JOBS:
        usage.append(f"--jobs: must be at most {MAX_JOBS:,}, got {jobs_wanted:,}")
    if plot_file is not None:
        from corral.sim.plot import PlotUnavailable, target_problems

        try:
            usage.extend(target_problems(plot_file))
        except PlotUnavailable as exc:
            usage.append(str(exc))
    if usage:
        raise _fail(usage)
    if fmt.value.startswith("synthetic-"):
        from corral.sim.synthetic import generate

        if trace is not None:
            raise _fail([f"--trace: not used with --format {fmt.value} (the jobs are generated)"])
        sim_seed = seed if seed is not None else sim_config.seed
        jobs = generate(
            fmt.value.removeprefix("synthetic-"),
            seed=sim_seed,
            jobs=jobs_wanted,
            arrivals=arrivals.value,
        )
    elif trace is None:
        raise _fail([f"--trace: required with --format {fmt.value}"])
    else:
        try:
            jobs = read_trace(trace, TraceFormat(fmt.value))
        except TraceError as exc:
            raise _fail(exc.problems) from None
    try:
        metrics, replay = simulate(cluster, jobs, policy.value, seed)
        if plot_file is not None:
            from corral.sim.plot import plot

            try:
                plot(replay, metrics, plot_file)
            except OSError as exc:  # checked above, but the disk may still fill or refuse
                raise _fail([f"{plot_file}: cannot write: {exc.strerror or exc}"]) from None
    except typer.Exit:
        raise
    except Exception as exc:  # a bug in Corral: still one line, never a traceback
        typer.echo(f"internal error: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(EXIT_INTERNAL) from None
    if as_json:
        typer.echo(json.dumps(metrics.as_dict()))
        return
    _table(metrics.as_dict(), describe_skipped(jobs))


_UNITS = {"cost_usd": "$", "oracle_cost_usd": "$"}
_SHARES = frozenset({"on_demand_share"})  # 0 to 1 in JSON, a percentage in the table


def _table(figures: dict[str, object], skipped: str) -> None:
    table = Table(title=f"corral sim: policy {figures['policy']}", show_header=False)
    table.add_column("figure", style="bold")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        if key == "policy":
            continue
        if key in _SHARES and isinstance(value, float):
            text = f"{value:.1%}"
        elif isinstance(value, float):
            text = f"{_UNITS.get(key, '')}{value:,.2f}"
        else:
            text = f"{value:,}" if isinstance(value, int) else str(value)
        table.add_row(key, text)
    console = Console()
    console.print(table)
    notes = [f"prices: catalog as of {PRICES_AS_OF}"]
    if skipped:
        notes.append(f"trace rows skipped: {skipped}")
    console.print("; ".join(notes), style="dim")
