"""``corral command run [--config-file F] -- CMD ...``: one process on one agent."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from corral.cli import render
from corral.cli.client import client_from
from corral.cli.experiment_cmd import read_config
from corral.cli.render import EndpointOption, JsonOption
from corral.cli.trial_cmd import stream_logs

app = typer.Typer(help="Run commands on the cluster.", no_args_is_help=True)


@app.command("run")
def run(
    argv: Annotated[list[str], typer.Argument(metavar="-- CMD ...", help="The command line.")],
    config_file: Annotated[
        Path | None, typer.Option("--config-file", "-c", help="Command config (YAML).")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow/--detach", help="Print its output until it ends.")
    ] = True,
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """Run a command as a one-trial job; exits with failure if the command fails."""
    with render.guard():
        client = client_from(endpoint)
        config = read_config(config_file) if config_file else {}
        detail = client.post("/commands", {"config": config, "argv": list(argv)})
        if json_out:
            render.print_json(detail)
            return
        trial_ids = [t["id"] for t in detail.get("trials") or []]
        render.err_console.print(f"command {detail['id']}: trial {', '.join(trial_ids)}")
        if not follow or not trial_ids:
            return
        page = stream_logs(client, trial_ids[0], follow=True)
        if page.get("trial_state") != "COMPLETED":
            render.err_console.print(f"command ended {page.get('trial_state')}")
            raise typer.Exit(1)
