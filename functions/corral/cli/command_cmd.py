"""``corral command run [--config-file F] [--] CMD ...``: one process on one agent."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from corral.cli import render
from corral.cli.client import ApiClient, api_path, client_from
from corral.cli.experiment_cmd import read_config
from corral.cli.render import EndpointOption, JsonOption
from corral.cli.trial_cmd import stream_logs

app = typer.Typer(help="Run commands on the cluster.", no_args_is_help=True)


# Options come before the command line; everything from its first word on is the command's,
# its own options included (``corral command run -c cfg.yaml ls -l /x``); ``--`` also works.
@app.command("run", context_settings={"allow_interspersed_args": False})
def run(
    argv: Annotated[
        list[str],
        typer.Argument(
            metavar="[--] CMD ...",
            help="The command line: everything after the options (or after --).",
        ),
    ],
    config_file: Annotated[
        Path | None, typer.Option("--config-file", "-c", help="Command config (YAML).")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow/--detach", help="Print its output until it ends.")
    ] = True,
    json_out: JsonOption = False,
    endpoint: EndpointOption = None,
) -> None:
    """Run a command as a one-trial job, print all of its output and exit with its exit
    code (non-zero with the reason on stderr if it was killed or could not run)."""
    with render.guard():
        config = read_config(config_file) if config_file else {}  # a bad file first
        client = client_from(endpoint)
        detail = client.post("/commands", {"config": config, "argv": list(argv)})
        if json_out:
            render.print_json(detail)
            return
        trial_ids = [t["id"] for t in detail.get("trials") or []]
        render.echo(f"command {detail['id']}: trial {', '.join(trial_ids)}", err=True)
        if not follow or not trial_ids:
            return
        page = stream_logs(client, trial_ids[0], follow=True)
        code = exit_status(client, str(detail["id"]), trial_ids[0], page)
        if code:
            raise typer.Exit(code)


def exit_status(client: ApiClient, command_id: str, trial_id: str, page: dict[str, Any]) -> int:
    """The command's own exit code, as ``docker run`` gives it; 1 with a one-line reason on
    stderr when it did not exit by itself (killed, or it could not run)."""
    state = page.get("trial_state")
    if state == "COMPLETED":
        return 0
    trial = client.get(api_path("trials", trial_id))
    state = trial.get("state") or state
    code = trial.get("exit_code")
    if state == "FAILED" and isinstance(code, int) and 0 < code < 256:
        return code
    history = trial.get("history") or []
    why = None
    if state == "CANCELLED":  # "killed by user" rather than the agent's "stopped"
        why = next(
            (h.get("reason") for h in reversed(history) if h.get("state") == "STOPPING"), None
        )
    if not why and history:
        why = history[-1].get("reason")
    if code is not None:
        why = f"{why or 'ended'} (exit code {code})"
    render.echo(
        f"command {command_id} {state}: {why or 'no reason given'}", err=True, soft_wrap=True
    )
    return 1
