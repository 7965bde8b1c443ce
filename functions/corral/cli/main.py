"""Root of the ``corral`` command: sub-apps are registered here, one module each.

Add a sub-app with ``app.add_typer(<module>.app, name="<group>")``; keep commands thin and put
logic in the domain or services.
"""

from __future__ import annotations

from importlib import metadata
from typing import Annotated

import typer

from corral.cli import (
    agent_cmd,
    command_cmd,
    config_cmd,
    dashboard_cmd,
    dev_cmd,
    events_cmd,
    experiment_cmd,
    pool_cmd,
    sim_cmd,
    trial_cmd,
)

app = typer.Typer(
    name="corral",
    help="Corral: serverless control plane for elastic GPU training clusters.",
    no_args_is_help=True,
    # Users get one readable line per problem, never a traceback.
    pretty_exceptions_enable=False,
    add_completion=False,
)


def version() -> str:
    """The installed package's version (``pyproject.toml``), as pip knows it."""
    try:
        return metadata.version("corral")
    except metadata.PackageNotFoundError:  # run from a source tree never installed
        return "unknown"


def _print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"corral {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


app.add_typer(config_cmd.app, name="config")
app.add_typer(sim_cmd.app, name="sim")
app.add_typer(experiment_cmd.app, name="experiment")
app.add_typer(trial_cmd.app, name="trial")
app.add_typer(command_cmd.app, name="command")
app.add_typer(agent_cmd.app, name="agent")
app.add_typer(pool_cmd.app, name="pool")
app.add_typer(events_cmd.app, name="events")
app.add_typer(dev_cmd.app, name="dev")
app.command("dashboard")(dashboard_cmd.dashboard)


def main() -> None:
    """Console-script entry point (``corral = corral.cli.main:main``)."""
    app()


if __name__ == "__main__":
    main()
