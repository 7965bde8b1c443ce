"""``corral pool list``: what each pool runs, may launch, and why it launches nothing."""

from __future__ import annotations

import typer

from corral.cli import render
from corral.cli.client import client_from
from corral.cli.render import EndpointOption, JsonOption

app = typer.Typer(help="Inspect resource pools.", no_args_is_help=True)


def _offerings(offerings: list[dict[str, object]]) -> str:
    """A count, plus the offerings the cloud refused (the full list is in --json)."""
    refused = [str(o.get("key")) for o in offerings if not o.get("available", True)]
    return f"{len(offerings)}" + (f"; unavailable: {', '.join(refused)}" if refused else "")


POOL_COLUMNS: list[render.Column] = [
    ("POOL", lambda p: str(p.get("name")) + (" (default)" if p.get("is_default") else "")),
    ("INSTANCES", lambda p: render.by_state(p.get("instances_by_state"))),
    ("RANGE", lambda p: f"{p.get('min_instances')}..{p.get('max_instances')}"),
    ("PENDING", lambda p: p.get("trials_pending")),
    ("RUNNING", lambda p: p.get("trials_running")),
    ("OFFERINGS", lambda p: _offerings(p.get("offerings") or [])),
    ("SPENT", lambda p: render.money((p.get("budget") or {}).get("spent_usd"))),
    ("BLOCKED", lambda p: p.get("blocked_reason") or ""),
    # Pending trials no launch serves (at max_instances, budget, backoff, breaker, refusals).
    ("CANNOT SERVE", lambda p: p.get("cannot_serve") or ""),
]


@app.command("list")
def list_cmd(json_out: JsonOption = False, endpoint: EndpointOption = None) -> None:
    """Pools: instances by state, offerings, backoff, breaker, budget, and whether each can
    serve the trials waiting in it."""
    with render.guard():
        reply = client_from(endpoint).get("/pools")
        if json_out:
            render.print_json(reply)
            return
        render.table("Pools", POOL_COLUMNS, reply.get("pools") or [])
