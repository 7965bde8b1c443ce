"""How the CLI shows things: Rich tables for lists, key/value panels for one record, JSON
with ``--json``, and one-line errors (never a traceback) with a non-zero exit."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from corral.cli.client import EXIT_ERROR, CliError

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the raw JSON reply.")]
EndpointOption = Annotated[
    str | None,
    typer.Option("--endpoint", envvar="CORRAL_ENDPOINT", help="API URL (default: local stack)."),
]

Column = tuple[str, Callable[[dict[str, Any]], Any]]


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Turn every failure into ``error: <one line>`` and an exit code."""
    try:
        yield
    except CliError as exc:
        err_console.print(f"[red]error:[/red] {exc.message}", markup=True, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except typer.Exit:
        raise
    except Exception as exc:  # a bug in Corral: still one line
        err_console.print(f"error: internal: {type(exc).__name__}: {exc}", markup=False)
        raise typer.Exit(EXIT_ERROR) from None


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def age(at: float | None, now: float | None = None) -> str:
    if not at:
        return "-"
    return duration((now or time.time()) - at) + " ago"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


_STATE_STYLE = {
    "COMPLETED": "green",
    "RUNNING": "cyan",
    "BUSY": "cyan",
    "IDLE": "blue",
    "PENDING": "yellow",
    "QUEUED": "yellow",
    "REQUESTED": "yellow",
    "ASSIGNED": "yellow",
    "FAILED": "red",
    "ALLOCATION_FAILED": "red",
    "LOST": "red",
    "PREEMPTED": "magenta",
    "CANCELLED": "dim",
    "TERMINATED": "dim",
    "DRAINING": "magenta",
    "ACTIVE": "cyan",
}


def state(value: Any) -> str:
    text = str(value or "-")
    style = _STATE_STYLE.get(text.upper())
    return f"[{style}]{text}[/{style}]" if style else text


def table(title: str | None, columns: Sequence[Column], rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        console.print(f"no {title.lower() if title else 'rows'}")
        return
    out = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    for n, (header, _) in enumerate(columns):
        # Ids stay whole (they are copied into the next command); other cells fold.
        out.add_column(header, overflow="fold", no_wrap=n == 0)
    for row in rows:
        out.add_row(*(str(get(row)) for _, get in columns))
    console.print(out)


def fields(title: str, pairs: Sequence[tuple[str, Any]]) -> None:
    out = Table(title=title, title_justify="left", show_header=False, show_edge=False)
    out.add_column(style="bold")
    out.add_column(overflow="fold")
    for key, value in pairs:
        out.add_row(key, "-" if value is None or value == "" else str(value))
    console.print(out)


def by_state(counts: dict[str, int] | None) -> str:
    return ", ".join(f"{n} {s.lower()}" for s, n in sorted((counts or {}).items()) if n) or "-"


TRIAL_COLUMNS: list[Column] = [
    ("TRIAL", lambda t: t.get("id")),
    ("STATE", lambda t: state(t.get("state"))),
    ("SLOTS", lambda t: t.get("slots")),
    ("ON", lambda t: ",".join(p.get("instance_id", "") for p in t.get("placement") or []) or "-"),
    ("PREEMPTED", lambda t: t.get("preemptions", 0)),
    ("RESTARTS", lambda t: f"{t.get('restarts', 0)}/{t.get('max_restarts', '-')}"),
    ("COST", lambda t: money(t.get("cost_usd"))),
    ("HYPERPARAMETERS", lambda t: json.dumps(t.get("hyperparameters") or {}, sort_keys=True)),
    ("WHY PENDING", lambda t: t.get("pending_reason") or ""),
]
