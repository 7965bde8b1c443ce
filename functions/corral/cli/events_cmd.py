"""``corral events [--follow]``: the event log that explains every launch and termination."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Annotated, Any

import typer

from corral.cli import render
from corral.cli.client import client_from
from corral.cli.render import EndpointOption, JsonOption

app = typer.Typer(help="The event log.", invoke_without_command=True)


def event_line(e: dict[str, Any]) -> str:
    at = datetime.fromtimestamp(float(e.get("at") or 0)).strftime("%H:%M:%S")
    subject = e.get("trial_id") or e.get("instance_id") or e.get("experiment_id") or ""
    pool = f"[{e['pool']}] " if e.get("pool") else ""
    return f"{at} {pool}{e.get('kind')}: {e.get('message')}" + (
        f" ({subject})" if subject and subject not in str(e.get("message")) else ""
    )


@app.callback()
def events(
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events.")
    ] = False,
    since: Annotated[float, typer.Option(help="Only events after this epoch time.")] = 0.0,
    pool: Annotated[str | None, typer.Option(help="Only this pool.")] = None,
    limit: Annotated[
        int,
        typer.Option(
            min=1, help="Print at most this many events (with --follow: per page, no end)."
        ),
    ] = 200,
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
    poll_s: Annotated[float, typer.Option(hidden=True)] = 2.0,
) -> None:
    """Print the event log, oldest first; --follow keeps printing new events."""
    with render.guard():
        client = client_from(endpoint)
        left = limit  # without --follow, --limit is the number printed, not a page size
        while True:
            page = client.get("/events", {"since": since, "limit": limit, "pool": pool})
            if json_out and not follow:
                render.print_json(page)
                return
            for e in (page.get("events") or [])[: None if follow else left]:
                if json_out:
                    print(json.dumps(e, sort_keys=True), flush=True)
                else:
                    render.echo(render.one_line(event_line(e)))  # one line per event
                left -= 1
            since = float(page.get("next_since", since))
            if not follow and left <= 0:
                return
            if page.get("has_more"):
                continue
            if not follow:
                return
            time.sleep(poll_s)
