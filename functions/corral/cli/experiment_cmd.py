"""``corral experiment create|list|describe|kill``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from corral.cli import render
from corral.cli.client import EXIT_USAGE, ApiClient, CliError, api_path, client_from
from corral.cli.render import EndpointOption, JsonOption
from corral.domain.config import ConfigError, read_source

app = typer.Typer(help="Submit, list, inspect and kill experiments.", no_args_is_help=True)

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED"}
TRIAL_TERMINAL = {"COMPLETED", "FAILED", "CANCELLED"}

Col = render.Col
EXPERIMENT_COLUMNS: list[render.Column] = [
    Col("EXPERIMENT", lambda e: e.get("id"), fit="keep"),
    Col("NAME", lambda e: e.get("name")),
    Col("STATE", lambda e: render.state(e.get("state")), fit="keep"),
    Col("POOL", lambda e: e.get("pool"), drop=2),
    Col("TRIALS", lambda e: render.by_state(e.get("trials_by_state"))),
    # Who submitted it, shortened (an IAM ARN loses its common prefix); whole in describe.
    Col("OWNER", lambda e: render.principal(e.get("owner")), drop=4),
    Col("BEST", lambda e: render.metric((e.get("best") or {}).get("value")), drop=3),
    Col("SUBMITTED", lambda e: render.age(e.get("submitted_at")), fit="keep", drop=1),
    Col("COST", lambda e: render.money(e.get("cost_usd")), fit="keep"),
]


def best_line(best: dict[str, Any] | None) -> str:
    """``validation_loss=0.31 (exp-1.t0002)``, or "-" before any trial reported it."""
    if not best:
        return "-"
    return f"{best.get('metric')}={render.metric(best.get('value'))} ({best.get('trial_id')})"


def read_config(file: Path) -> str:
    """The text of a user's config file, read as ``corral config validate`` reads it: the
    same ``FILE: reason`` (no such file, is a directory, not UTF-8) and the same exit 2."""
    try:
        return read_source(file)
    except ConfigError as exc:
        reasons = "; ".join(f"{p.path or file}: {p.reason}" for p in exc.problems)
        raise CliError(reasons, EXIT_USAGE) from None


def trial_line(trial: dict[str, Any]) -> str:
    """A trial's state, where it runs, and while pending why it waits."""
    where = ",".join(p.get("instance_id", "") for p in trial.get("placement") or [])
    line = f"{trial.get('state')}{' on ' + where if where else ''}"
    reason = trial.get("pending_reason")
    if reason and trial.get("state") == "PENDING":
        line += f" ({reason})"
    return line


def follow_experiment(
    client: ApiClient,
    experiment_id: str,
    *,
    poll_s: float = 2.0,
    timeout_s: float | None = None,
    on_poll: Any = None,
) -> dict[str, Any]:
    """Show progress until the experiment is terminal; returns its final detail. Each change
    of a trial's state, placement or pending reason is also printed once as a line, so a log
    file of the run tells the story (and says why a trial waits as soon as the scheduler
    knows)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    seen: dict[str, str] = {}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=render.console, transient=False) as progress:
        overall = progress.add_task("trials completed", total=None)
        while True:
            detail = client.get(api_path("experiments", experiment_id))
            trials = detail.get("trials") or []
            for trial in trials:
                line = trial_line(trial)
                if seen.get(trial["id"]) != line:
                    shown = render.one_line(f"{trial['id']}: {line}")
                    progress.console.print(shown, markup=False, emoji=False)
                    seen[trial["id"]] = line
            done = sum(1 for t in trials if t.get("state") in TRIAL_TERMINAL)
            progress.update(overall, total=len(trials) or None, completed=done)
            if on_poll is not None:
                on_poll(detail)
            if detail.get("state") in TERMINAL:
                return dict(detail)
            if deadline is not None and time.monotonic() > deadline:
                raise CliError(f"gave up following {experiment_id} after {timeout_s:.0f} s")
            time.sleep(poll_s)


def summary_line(detail: dict[str, Any]) -> str:
    return (
        f"experiment {detail.get('id')} {detail.get('state')}: "
        f"{render.by_state(detail.get('trials_by_state'))}; "
        f"{detail.get('gpu_hours', 0):.4f} GPU-hours, {render.money(detail.get('cost_usd'))}"
    )


def created_line(detail: dict[str, Any], *, replayed: bool = False) -> str:
    """What a submission did. ``replayed``: the API answered with the experiment an earlier
    submission with the same client token created (200, not 201), so nothing new exists and
    saying "created" would make a user look for a second experiment."""
    what = (
        f"experiment {detail['id']} ({detail.get('name')})"
        + (" was already submitted with this client token" if replayed else "")
        + f": {detail.get('trial_count', len(detail.get('trials') or []))} trial(s) "
        f"in pool {detail.get('pool')}"
    )
    return what if replayed else f"created {what}"


@app.command("create")
def create(
    file: Annotated[Path, typer.Argument(help="Experiment config (YAML).")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Show progress until done.")
    ] = False,
    client_token: Annotated[
        str | None, typer.Option(help="Idempotency token: a retry returns the same experiment.")
    ] = None,
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """Submit an experiment; with --follow, exit 0 only if every trial completes."""
    with render.guard():
        body: dict[str, Any] = {"config": read_config(file)}  # a bad file first: no API
        client = client_from(endpoint)
        if client_token:
            body["client_token"] = client_token
        status, detail = client.post_with_status("/experiments", body)
        if json_out and not follow:
            render.print_json(detail)
            return
        render.echo(created_line(detail, replayed=bool(client_token) and status != 201))
        if not follow:
            return
        final = follow_experiment(client, detail["id"])
        if json_out:
            render.print_json(final)
        else:
            render.echo(summary_line(final))
        if final.get("state") != "COMPLETED":
            raise typer.Exit(1)


@app.command("list")
def list_cmd(
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 50,
    mine: Annotated[bool, typer.Option("--mine", help="Only the experiments you own.")] = False,
    owner: Annotated[
        str | None, typer.Option(help="Only those of this owner (as `describe` shows it).")
    ] = None,
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """List experiments, newest first: everyone's, yours (--mine) or one owner's."""
    with render.guard():
        params: dict[str, Any] = {"limit": limit, "mine": mine or None, "owner": owner}
        reply = client_from(endpoint).get("/experiments", params)
        if json_out:
            render.print_json(reply)
            return
        render.table("Experiments", EXPERIMENT_COLUMNS, reply.get("experiments") or [])
        if reply.get("truncated"):
            render.err_console.print(
                "note: only the newest 10,000 experiments were searched for the owner's"
            )


@app.command("describe")
def describe(
    experiment_id: Annotated[str, typer.Argument(metavar="ID")],
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """An experiment and its trials."""
    with render.guard():
        e = client_from(endpoint).get(api_path("experiments", experiment_id))
        if json_out:
            render.print_json(e)
            return
        render.fields(
            f"Experiment {e.get('id')}",
            [
                ("name", e.get("name")),
                ("state", render.state(e.get("state"))),
                ("pool", e.get("pool")),
                ("owner", e.get("owner")),
                ("submitted", render.age(e.get("submitted_at"))),
                ("trials", render.by_state(e.get("trials_by_state"))),
                ("GPU-hours", f"{e.get('gpu_hours', 0):.4f}"),
                ("cost", render.money(e.get("cost_usd"))),
                ("best", best_line(e.get("best"))),
            ],
        )
        render.table("Trials", render.TRIAL_COLUMNS, e.get("trials") or [])


@app.command("kill")
def kill(
    experiment_id: Annotated[str, typer.Argument(metavar="ID")],
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """Stop every trial of an experiment or command (running ones are told to stop). Only
    its owner or an admin (the cluster config's `admins`) may. One that had already ended is
    left as it is: that is said, and the exit status is still 0."""
    with render.guard():
        client = client_from(endpoint)
        # Asked first because the kill's reply cannot tell "already ended" from "ended by
        # this kill" (a kill cancels pending trials at once, so both read CANCELLED), and
        # because the API would record a kill, and a "killed by" event, on a finished one.
        before = client.get(api_path("experiments", experiment_id))
        what = "command" if before.get("is_command") else "experiment"
        if before.get("state") in TERMINAL:
            # Exit 0: a kill is idempotent. What the caller wants (nothing of it runs) holds,
            # and a cleanup script killing what may have finished must not fail on it.
            if json_out:
                render.print_json(before)
                return
            render.echo(
                f"{what} {before.get('id')} had already ended: {before.get('state')} "
                "(nothing to kill)"
            )
            return
        e = client.post(api_path("experiments", experiment_id, "kill"))
        if json_out:
            render.print_json(e)
            return
        again = " (it was already being killed)" if before.get("state") == "STOPPING" else ""
        render.echo(f"{what} {e.get('id')}: {e.get('state')}{again}")
