"""``corral pool list``: what each pool runs, may launch, and why it launches nothing;
``corral pool reset-breaker NAME``: an admin closes a pool's boot circuit breaker."""

from __future__ import annotations

from typing import Annotated

import typer

from corral.cli import render
from corral.cli.client import api_path, client_from
from corral.cli.render import EndpointOption, JsonOption

app = typer.Typer(help="Inspect resource pools.", no_args_is_help=True)


def _offerings(offerings: list[dict[str, object]]) -> str:
    """A count, plus the offerings the cloud refused (the full list is in --json)."""
    refused = [str(o.get("key")) for o in offerings if not o.get("available", True)]
    return f"{len(offerings)}" + (f"; unavailable: {', '.join(refused)}" if refused else "")


Col = render.Col
POOL_COLUMNS: list[render.Column] = [
    Col(
        "POOL",
        lambda p: str(p.get("name")) + (" (default)" if p.get("is_default") else ""),
        fit="keep",
    ),
    Col("INSTANCES", lambda p: render.by_state(p.get("instances_by_state"))),
    Col("RANGE", lambda p: f"{p.get('min_instances')}..{p.get('max_instances')}", fit="keep"),
    Col("PENDING", lambda p: p.get("trials_pending"), fit="keep"),
    Col("RUNNING", lambda p: p.get("trials_running"), fit="keep", drop=2),
    Col("OFFERINGS", lambda p: _offerings(p.get("offerings") or []), drop=3),
    Col(
        "SPENT",
        lambda p: render.money((p.get("budget") or {}).get("spent_usd")),
        fit="keep",
        drop=1,
    ),
    Col("BLOCKED", lambda p: p.get("blocked_reason") or "", fit="wrap"),
    # Pending trials no launch serves (at max_instances, budget, backoff, breaker, refusals).
    Col("CANNOT SERVE", lambda p: p.get("cannot_serve") or "", fit="wrap"),
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


@app.command("reset-breaker")
def reset_breaker(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The pool.")],
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """Close the pool's boot circuit breaker now, once the image or startup script that kept
    instances from registering is fixed (admins only; the event log says who)."""
    with render.guard():
        pool = client_from(endpoint).post(api_path("pools", name, "reset-breaker"))
        if json_out:
            render.print_json(pool)
            return
        breaker = pool.get("breaker") or {}
        render.echo(
            f"pool {pool.get('name')}: breaker {'open' if breaker.get('open') else 'closed'}, "
            f"{breaker.get('boot_failures', 0)} boot failure(s) counted"
        )
