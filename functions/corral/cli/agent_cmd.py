"""``corral agent list``: the instances Corral runs (or ran) and their agents."""

from __future__ import annotations

from typing import Annotated

import typer

from corral.cli import render
from corral.cli.client import client_from
from corral.cli.render import EndpointOption, JsonOption

app = typer.Typer(help="Inspect agents (one per instance).", no_args_is_help=True)

Col = render.Col
AGENT_COLUMNS: list[render.Column] = [
    Col("INSTANCE", lambda i: i.get("id"), fit="keep"),
    Col("STATE", lambda i: render.state(i.get("state")), fit="keep"),
    Col("OFFERING", lambda i: f"{i.get('instance_type')} {i.get('capacity_type')}"),
    Col(
        "GPUS",
        lambda i: f"{i.get('slots', 0) - i.get('free_slots', 0)}/{i.get('slots', 0)}",
        fit="keep",
    ),
    Col("TRIALS", lambda i: ",".join(i.get("trials") or []) or "-"),
    Col(
        "IDLE",
        lambda i: render.duration(i.get("idle_s")) if i.get("idle_s") is not None else "-",
        fit="keep",
    ),
    Col("COST", lambda i: render.money(i.get("cost_usd")), fit="keep"),
    # The cloud's id: for the cloud console; Corral's commands take the INSTANCE id.
    Col("CLOUD ID", lambda i: i.get("cloud_id") or "-", fit="keep", drop=1),
]


@app.command("list")
def list_cmd(
    pool: Annotated[str | None, typer.Option(help="Only this pool.")] = None,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Include terminated.")] = False,
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """Agents and the instances under them."""
    with render.guard():
        reply = client_from(endpoint).get("/agents", {"pool": pool, "all": all_})
        if json_out:
            render.print_json(reply)
            return
        render.table("Agents", AGENT_COLUMNS, reply.get("instances") or [])
