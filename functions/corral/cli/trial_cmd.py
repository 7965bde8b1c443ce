"""``corral trial list|describe|logs``."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from corral.cli import render
from corral.cli.client import ApiClient, api_path, client_from
from corral.cli.render import EndpointOption, JsonOption

app = typer.Typer(help="Inspect trials and read their logs.", no_args_is_help=True)


@app.command("list")
def list_cmd(
    experiment_id: Annotated[str, typer.Argument(metavar="EXPERIMENT")],
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """The trials of an experiment."""
    with render.guard():
        client = client_from(endpoint)
        trials: list[dict[str, object]] = []
        offset: int | None = 0
        while offset is not None:  # every page: the API holds a response to 6 MB
            page = client.get(api_path("experiments", experiment_id, "trials"), {"offset": offset})
            trials.extend(page.get("trials") or [])
            offset = page.get("next_offset")
        if json_out:
            render.print_json({"trials": trials, "total": len(trials)})
            return
        render.table("Trials", render.TRIAL_COLUMNS, trials)


@app.command("describe")
def describe(
    trial_id: Annotated[str, typer.Argument(metavar="ID")],
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """One trial: state, placement, checkpoint, cost and history."""
    with render.guard():
        t = client_from(endpoint).get(api_path("trials", trial_id))
        if json_out:
            render.print_json(t)
            return
        latest = t.get("latest_metrics") or {}
        render.fields(
            f"Trial {t.get('id')}",
            [
                ("experiment", t.get("experiment_id")),
                ("state", render.state(t.get("state"))),
                ("pending because", t.get("pending_reason")),
                ("slots", t.get("slots")),
                (
                    "placement",
                    ", ".join(
                        f"{p.get('instance_id')} gpus {p.get('gpus')}"
                        for p in t.get("placement") or []
                    ),
                ),
                ("ran on", ", ".join(t.get("ran_on") or [])),
                ("restarts", f"{t.get('restarts', 0)}/{t.get('max_restarts', '-')}"),
                ("preemptions", t.get("preemptions")),
                ("latest checkpoint", t.get("latest_checkpoint")),
                ("exit code", t.get("exit_code")),
                ("GPU-hours", f"{t.get('gpu_hours', 0):.4f}"),
                ("cost", render.money(t.get("cost_usd"))),
                ("hyperparameters", render.hparams(t.get("hyperparameters"))),
                ("best value", render.metric(t.get("best_value"))),
                ("last training", render.metric_values(latest.get("training"))),
                ("last validation", render.metric_values(latest.get("validation"))),
            ],
        )
        render.table(
            "History",
            [
                ("STATE", lambda h: render.state(h.get("state"))),
                ("WHEN", lambda h: render.age(h.get("at"))),
                ("WHY", lambda h: h.get("reason")),
            ],
            t.get("history") or [],
        )


# How long a done trial's last lines may take to arrive before a follower gives up on them
# (its agent ships them before the terminal status, so this only covers a failed flush).
LOG_DRAIN_S = 30.0


def stream_logs(
    client: ApiClient,
    trial_id: str,
    *,
    follow: bool,
    poll_s: float = 1.0,
    printer: Any = None,
    drain_s: float = LOG_DRAIN_S,
) -> dict[str, Any]:
    """Print every log line (pages of up to 1000); with ``follow``, keep going until the
    trial is done and its output complete: up to the last line its agent reported, even if
    that arrives after the terminal state. Returns the last page."""
    after = -1
    emit = printer or (lambda line: print(line, flush=True))
    waited = 0.0  # while done but incomplete: time since lines last came
    while True:
        page = client.get(api_path("trials", trial_id, "logs"), {"after_seq": after, "limit": 1000})
        lines = page.get("lines") or []
        for line in lines:
            emit(render.log_line(line.get("line", "")))
        after = int(page.get("next_after_seq", after))
        if page.get("has_more"):
            continue
        if not follow:
            return dict(page)
        if page.get("trial_done"):
            if page.get("logs_complete", True):  # an older API does not say: done is done
                return dict(page)
            waited = 0.0 if lines else waited + poll_s
            if waited >= drain_s:
                render.echo(
                    f"warning: the last output of trial {trial_id} has not arrived; "
                    f"`corral trial logs {trial_id}` shows it if it does",
                    err=True,
                    soft_wrap=True,
                )
                return dict(page)
        time.sleep(poll_s)


@app.command("logs")
def logs(
    trial_id: Annotated[str, typer.Argument(metavar="ID")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Wait for new lines.")] = False,
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """A trial's output; with --follow, until the trial is done."""
    with render.guard():
        client = client_from(endpoint)
        if json_out:
            render.print_json(client.get(api_path("trials", trial_id, "logs"), {"limit": 5000}))
            return
        stream_logs(client, trial_id, follow=follow)
