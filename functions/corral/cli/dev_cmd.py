"""``corral dev up|down|status|interrupt|rebalance|capacity|user``: the local stack."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.cli import render
from corral.cli.client import (
    EXIT_USAGE,
    ApiClient,
    CliError,
    Endpoint,
    check_url,
    resolve_endpoint,
)
from corral.cli.experiment_cmd import read_config
from corral.domain.config import ConfigError
from corral.local.state import STATE_ENV, StateDir, pid_alive

app = typer.Typer(
    help="Run Corral locally: moto, the real handlers, emulated instances.", no_args_is_help=True
)

DEFAULT_CONFIG = Path("examples/cluster.yaml")
READY_TIMEOUT_S = 90.0
# At most this many of a failed start's own log lines are shown; the log keeps them all.
SHOWN_LOG_LINES = 20
# Timers: the stack never runs one more often than every 0.5 s (timers.py), where the
# template's one-minute timers are below about 0.01 (0 ran every timer back to back); above
# 1000 a one-minute timer would wait more than 16 hours, which no demo or test wants.
TIMER_SCALE_RANGE = (0.01, 1000.0)
BOOT_DELAY_RANGE = (0.0, 86400.0)  # up to a day: "agents never boot" in a benchmark


def _state() -> StateDir:
    return StateDir.default()


def _this_runs_output(log: Path, offset: int) -> list[str]:
    """The lines the stack started by this command wrote to ``log``: those from ``offset``
    (its size before the start) on. The log is appended to across runs, so its tail alone
    would show an earlier run's errors as this one's."""
    try:
        with log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.strip().splitlines() if line.strip()]


def _wait_ready(state: StateDir, proc: subprocess.Popen[bytes], log: Path, offset: int = 0) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            lines = _this_runs_output(log, offset)
            shown = lines[-SHOWN_LOG_LINES:]
            if len(lines) > len(shown):
                shown.insert(0, f"(... {len(lines) - len(shown)} earlier line(s) in {log})")
            # The stack's own exit status: 2 when it refused its input (as this command
            # would have), else 1.
            code = EXIT_USAGE if proc.returncode == EXIT_USAGE else 1
            raise CliError(
                "the stack exited while starting:\n  " + "\n  ".join(shown or ["(no output)"]),
                code,
            )
        url = state.endpoint()
        if url and state.stack_pid() == proc.pid:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                    return url
            except OSError:
                pass
        time.sleep(0.2)
    raise CliError(f"the stack did not become ready in {READY_TIMEOUT_S:.0f} s; see {log}")


@app.command("up")
def up(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="Cluster config.")
    ] = DEFAULT_CONFIG,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background.")] = False,
    template: Annotated[Path | None, typer.Option(help="SAM template (default: infra/).")] = None,
    port: Annotated[
        int,
        typer.Option(
            help="API port (0: any free port).", callback=render.in_range(*render.PORT_RANGE)
        ),
    ] = 0,
    timer_scale: Annotated[
        float,
        typer.Option(
            help="Scale the template's timer periods (0.25 = 4x faster; 0.01 to 1000).",
            callback=render.in_range(*TIMER_SCALE_RANGE),
        ),
    ] = 1.0,
    boot_delay: Annotated[
        float,
        typer.Option(
            help="Seconds from running to agent start (0 to 86400).",
            callback=render.in_range(*BOOT_DELAY_RANGE, " seconds"),
        ),
    ] = 2.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Start the local stack (foreground; Ctrl-C stops everything it started)."""
    with render.guard():
        state = _state()
        running = state.running_pid()
        if running is not None:
            raise CliError(
                f"a local stack already runs (pid {running}) at {state.endpoint()}; "
                "`corral dev down` stops it"
            )
        # Both checked here, before anything starts: a bad one is refused with every problem
        # (exit 2), not found later in a background process's log.
        _check_cluster_config(config)
        _check_template(template)
        if detach:
            state.prepare()
            log = state.logs / "stack.log"
            offset = log.stat().st_size if log.exists() else 0
            argv = [
                sys.executable,
                "-m",
                "corral.cli.main",
                "dev",
                "up",
                "--config",
                str(config),
                "--port",
                str(port),
                "--timer-scale",
                str(timer_scale),
                "--boot-delay",
                str(boot_delay),
            ]
            if template is not None:
                argv += ["--template", str(template)]
            if verbose:
                argv.append("--verbose")
            env = {**os.environ, STATE_ENV: str(state.root)}
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            url = _wait_ready(state, proc, log, offset)
            render.echo(
                f"local stack running in the background (pid {proc.pid})\n"
                f"  API:        {url}\n  AWS (moto): {state.aws_endpoint()}\n"
                f"  logs:       {state.logs}\n  stop:       corral dev down"
            )
            return
        _run_foreground(config, template, port, timer_scale, boot_delay, verbose)


def _check_cluster_config(config: Path) -> None:
    """Refuse a cluster config the stack would refuse, with every problem the validator found
    (the stack's own reader, so the two cannot disagree)."""
    from corral.local.stack import read_cluster_config

    text = read_config(config)  # a missing, directory or non-UTF-8 file: said as everywhere
    try:
        read_cluster_config(text)
    except ConfigError as exc:
        problems = [str(p) for p in exc.problems]
        if len(problems) == 1:
            raise CliError(f"{config}: {problems[0]}", EXIT_USAGE) from None
        raise CliError(
            f"{config}: {len(problems)} problems:\n  " + "\n  ".join(problems), EXIT_USAGE
        ) from None


def _check_template(template: Path | None) -> None:
    """Refuse a SAM template the stack cannot read (missing, not YAML, no Resources)."""
    from corral.local.stack import default_template
    from corral.local.template import load_template

    path = template if template is not None else default_template()
    # Run from outside a checkout, the default is missing: say which option names another.
    hint = "" if template is not None else " (pass --template PATH to infra/template.yaml)"
    try:
        read_config(path)  # a missing, directory or non-UTF-8 file: said as for the config
        load_template(path)
    except CliError as exc:
        raise CliError(f"{exc.message}{hint}", EXIT_USAGE) from None
    except (OSError, ValueError) as exc:
        raise CliError(f"{exc}{hint}", EXIT_USAGE) from None


def _run_foreground(
    config: Path,
    template: Path | None,
    port: int,
    timer_scale: float,
    boot_delay: float,
    verbose: bool,
) -> None:
    from corral.local.stack import DevStack, StackOptions

    state = _state()
    state.prepare()
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[logging.StreamHandler(sys.stderr)],
    )
    for noisy in ("botocore", "urllib3", "boto3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    options = StackOptions(
        cluster_config=config,
        state=state,
        api_port=port,
        timer_scale=timer_scale,
        boot_delay_s=boot_delay,
        verbose=verbose,
    )
    if template is not None:
        options.template = template
    stack = DevStack(options)
    try:
        stack.start()
    except (OSError, RuntimeError, ValueError) as exc:
        raise CliError(f"could not start the local stack: {exc}") from None
    render.echo(stack.banner())
    stack.run_until_signalled()


@app.command("down")
def down(
    timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 30.0,
    force: Annotated[
        bool,
        typer.Option("--force", help="Stop even while experiments run (they are lost)."),
    ] = False,
) -> None:
    """Stop the local stack and every process it started.

    The stack keeps its state (experiments, trials, instances) only while it runs, so it
    refuses to stop while an experiment is still active, unless --force."""
    from corral.local.proctree import stop_tree

    with render.guard():
        state = _state()
        pid = state.running_pid()
        if pid is not None and not force:
            _refuse_while_active(state)
        if pid is not None:
            os.kill(pid, 15)
            deadline = time.monotonic() + timeout
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if pid_alive(pid):
                stop_tree(pid, graceful=False)
        # Whatever a crashed stack left behind (moto, agents and their trials).
        leftovers = [p for p in state.children() if pid_alive(p)]
        for child in leftovers:
            stop_tree(child, grace_s=2.0)
        state.clear_runtime_files()
        if pid is None and not leftovers:
            render.console.print("no local stack is running")
        else:
            render.console.print("local stack stopped")


def _refuse_while_active(state: StateDir) -> None:
    """Stopping the stack forgets every experiment: refuse while one is ACTIVE. Asks this
    stack's own API with its own token (never CORRAL_ENDPOINT or CORRAL_TOKEN, which may
    name another cluster or a token of an earlier run). A stack that cannot be asked (still
    starting, hung, crashed) must still be stoppable: say so and go on."""
    url = state.endpoint()
    if not url:
        return
    try:
        reply = ApiClient(Endpoint(url, state.token()), timeout_s=5.0).get(
            "/experiments", {"limit": 500}
        )
    except CliError as exc:
        render.echo(
            f"could not list the stack's experiments ({exc.message}); stopping it", err=True
        )
        return
    experiments = reply.get("experiments") if isinstance(reply, dict) else None
    active = [
        f"{e.get('id')} ({e.get('name')})"
        for e in experiments or []
        if isinstance(e, dict) and e.get("state") == "ACTIVE"
    ]
    if active:
        shown = ", ".join(active[:3]) + (f" and {len(active) - 3} more" if len(active) > 3 else "")
        raise CliError(
            f"{len(active)} experiment(s) still active: {shown}. The local stack keeps them only "
            "while it runs; wait for them, kill them (corral experiment kill ID), or pass --force"
        )


@app.command("status")
def status(json_out: render.JsonOption = False) -> None:
    """Is the stack up, where, and which agents run."""
    with render.guard():
        state = _state()
        pid = state.running_pid()
        agents = sorted(p.name for p in (state.root / "agents").glob("i-*")) if pid else []
        info = {
            "running": pid is not None,
            "pid": pid,
            "endpoint": state.endpoint() if pid else None,
            "aws_endpoint": state.aws_endpoint() if pid else None,
            "state_dir": str(state.root),
            "children": [p for p in state.children() if pid_alive(p)],
            "faults": state.read_faults(),
            "agent_dirs": agents,
        }
        if json_out:
            render.print_json(info)
            return
        if pid is None:
            render.echo(f"no local stack is running (state: {state.root})")
            raise typer.Exit(1)
        render.fields("Local stack", [(k, v) for k, v in info.items() if k != "agent_dirs"])


def _session(state: StateDir):  # type: ignore[no-untyped-def]
    from corral.local.moto_server import aws_env

    aws = state.aws_endpoint()
    if state.running_pid() is None or not aws:
        raise CliError("no local stack is running (corral dev up)")
    import boto3  # type: ignore[import-untyped]

    env = aws_env(aws)
    return boto3.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=env["AWS_SESSION_TOKEN"],
        region_name=env["AWS_DEFAULT_REGION"],
    ), aws


INSTANCE_HELP = (
    "The instance: its Corral record id (inst-..., the first column of `corral agent list`) "
    "or its EC2 id (i-..., the CLOUD ID column)."
)


def _cloud_id(ident: str, endpoint: str | None, state: StateDir) -> str:
    """The EC2 id of ``ident``: itself if it is one, else the ``cloud_id`` of the record of
    that id, as the stack's API lists it (terminated records included)."""
    if ident.startswith("i-"):
        return ident
    if not ident.startswith("inst-"):
        raise CliError("INSTANCE_ID must be a record id (inst-...) or an EC2 id (i-...)", 2)
    client = ApiClient(resolve_endpoint(endpoint or state.endpoint(), state))
    reply = client.get("/agents", {"all": True})
    records = reply.get("instances") if isinstance(reply, dict) else None
    for record in records or []:
        if isinstance(record, dict) and record.get("id") == ident:
            cloud_id = record.get("cloud_id")
            if not cloud_id:
                raise CliError(f"{ident} has no EC2 instance yet ({record.get('state') or '?'})")
            return str(cloud_id)
    raise CliError(f"no instance record {ident} (`corral agent list --all` lists them)")


def _spot_target(instance_id: str, endpoint: str | None) -> tuple[StateDir, Any, str, str]:
    """The local stack's state, its AWS session, the EC2 id an ``inst-``/``i-`` id names, and
    how to show it, for the commands that send an instance a cloud's notice."""
    ident = instance_id.strip()
    if endpoint is not None:
        check_url(endpoint)  # a bad one is an error whichever id was given
    state = _state()
    session, aws = _session(state)
    cloud_id = _cloud_id(ident, endpoint, state)
    os.environ["AWS_ENDPOINT_URL"] = aws
    shown = cloud_id if cloud_id == ident else f"{ident} ({cloud_id})"
    return state, session, cloud_id, shown


@app.command("interrupt")
def interrupt(
    instance_id: Annotated[str, typer.Argument(metavar="INSTANCE_ID", help=INSTANCE_HELP)],
    notice: Annotated[float, typer.Option(help="Seconds from warning to termination.")] = 10.0,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint", help="API that resolves inst-... ids (default: the local stack's)."
        ),
    ] = None,
) -> None:
    """Interrupt a spot instance: warning via EventBridge and metadata, then termination."""
    from corral.local import faults

    with render.guard():
        state, session, cloud_id, shown = _spot_target(instance_id, endpoint)
        try:
            at = faults.interrupt(state, session, cloud_id, notice)
        except faults.NotSpotError:
            # Bad input, not a failure: no on-demand instance can be interrupted.
            raise CliError(
                f"{shown} is on-demand: only spot instances get interruption notices", EXIT_USAGE
            ) from None
        except faults.FaultError as exc:
            raise CliError(str(exc)) from None
        render.echo(
            f"spot interruption warning sent to {shown}; terminated in "
            f"{max(0.0, at - time.time()):.0f} s"
        )


@app.command("rebalance")
def rebalance(
    instance_id: Annotated[str, typer.Argument(metavar="INSTANCE_ID", help=INSTANCE_HELP)],
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint", help="API that resolves inst-... ids (default: the local stack's)."
        ),
    ] = None,
) -> None:
    """Send a spot instance a rebalance recommendation (EventBridge and metadata)."""
    from corral.local import faults

    with render.guard():
        state, session, cloud_id, shown = _spot_target(instance_id, endpoint)
        try:
            faults.rebalance(state, session, cloud_id)
        except faults.NotSpotError:
            raise CliError(
                f"{shown} is on-demand: only spot instances get rebalance recommendations",
                EXIT_USAGE,
            ) from None
        except faults.FaultError as exc:
            raise CliError(str(exc)) from None
        render.echo(f"rebalance recommendation sent to {shown}")


@app.command("capacity")
def capacity(
    unavailable: Annotated[
        str | None, typer.Option(help="TYPE, TYPE:spot|on-demand or TYPE|LOCATION|CAPACITY.")
    ] = None,
    available: Annotated[str | None, typer.Option(help="Undo an --unavailable.")] = None,
) -> None:
    """Make launches of an offering fail with InsufficientInstanceCapacity (or stop that)."""
    from corral.local import faults

    with render.guard():
        if not unavailable and not available:
            raise CliError("pass --unavailable OFFERING or --available OFFERING", 2)
        state = _state()
        if state.running_pid() is None:
            raise CliError("no local stack is running (corral dev up)")
        try:
            if unavailable:
                key = faults.set_unavailable(state, unavailable, True)
                render.echo(f"{key}: launches now fail with InsufficientInstanceCapacity")
            if available:
                key = faults.set_unavailable(state, available, False)
                render.echo(f"{key}: available again")
        except faults.FaultError as exc:
            raise CliError(str(exc), 2) from None


user_app = typer.Typer(help="The local stack's named users (each with a token).")
app.add_typer(user_app, name="user", no_args_is_help=True)


@user_app.command("add")
def user_add(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The user's name (their owner name).")
    ],
    rotate: Annotated[
        bool, typer.Option("--rotate", help="Replace the token of an existing user.")
    ] = False,
) -> None:
    """Add a user to the local stack and print their token (shown once: only its digest is
    kept). The running API accepts it at once; use it with CORRAL_TOKEN=<token>."""
    from corral.local import users

    with render.guard():
        try:
            token = users.set_token(_state(), name, replace=rotate)
        except users.UserError as exc:
            raise CliError(str(exc), 2) from None
        # The token alone on stdout, so `export CORRAL_TOKEN=$(corral dev user add bob)` works.
        sys.stdout.write(token + "\n")
        render.echo(
            f"user {name}: {'new token' if rotate else 'added'} (not an admin unless the "
            "cluster config's `admins` names them); CORRAL_TOKEN=<the token above>",
            err=True,
        )


@user_app.command("list")
def user_list() -> None:
    """The local stack's users (names only: tokens are not kept)."""
    from corral.local import users

    with render.guard():
        try:
            found = users.names(_state())
        except users.UserError as exc:
            raise CliError(str(exc)) from None
        render.echo("\n".join(found) if found else "no users (start the stack first)")
