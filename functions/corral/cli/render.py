"""How the CLI shows things: Rich tables for lists, key/value panels for one record, JSON
with ``--json``, and one-line errors (never a traceback) with a non-zero exit."""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from corral.cli.client import EXIT_ERROR, CliError
from corral.domain.text import visible

# Markup stays on for callers that style their own words (``corral.cli.demo``); what this
# module prints from data (API replies, ids, names, messages, paths) goes in as ``Text`` or
# with ``markup=False``, so "[/x]" in a name is shown as typed, never parsed (or crashed on).
# And every string from data is shown through ``visible`` (``corral.domain.text``): control
# characters escaped (``\x1b``, ``\n``), so a name stored before the API refused them (or
# a trial's output) cannot move the cursor, retitle the window or hide text on the reader's
# terminal. Rich itself strips only a few (BEL, BS, VT, FF, CR), not ESC.
console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the raw JSON reply.")]
EndpointOption = Annotated[
    str | None,
    typer.Option("--endpoint", envvar="CORRAL_ENDPOINT", help="API URL (default: local stack)."),
]

PORT_RANGE = (0, 65535)

N = TypeVar("N", int, float)


def in_range(low: N, high: N, unit: str = "") -> Callable[[N], N]:
    """An option callback refusing a value outside ``low..high`` as a usage error that names
    the option and the range (exit 2). Not click's ranges: its FloatRange lets NaN through
    (no comparison with NaN is true), and its messages do not say the range."""

    def check(value: N) -> N:
        if not (math.isfinite(value) and low <= value <= high):
            raise typer.BadParameter(f"{value:g} is not in the range {low:g} to {high:g}{unit}")
        return value

    return check


@dataclass(frozen=True)
class Col:
    """A table column. ``fit`` says what happens when the table is wider than the terminal:
    ``keep`` (ids, short figures) is never cut; ``cut`` stays on one line and ends in "…";
    ``wrap`` (free text: a reason) takes several lines, broken at spaces. If cutting is not
    enough, columns with a ``drop`` rank are left out, rank 1 first."""

    header: str
    get: Callable[[dict[str, Any]], Any]
    fit: Literal["keep", "cut", "wrap"] = "cut"
    drop: int = 0


Column = Col | tuple[str, Callable[[dict[str, Any]], Any]]
MIN_CUT = 8  # narrowest a "cut" column gets (the header's width if that is more)
MIN_WRAP = 16
GAP = 3  # between columns: padding, rule, padding


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Turn every failure into ``error: <one line>`` and an exit code."""
    try:
        yield
    except CliError as exc:
        message = visible(exc.message, keep="\n\t")
        err_console.print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except typer.Exit:
        raise
    except Exception as exc:  # a bug in Corral: still one line
        echo(f"error: internal: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(EXIT_ERROR) from None


def echo(text: str, *, err: bool = False, soft_wrap: bool = True) -> None:
    """Print ``text`` as it is: no markup, no emoji codes (it holds ids, names, paths), and
    control characters escaped but for the newlines and tabs of the message itself. Not
    wrapped by Rich (80 columns when the output is not a terminal): a script reading
    ``created experiment ID (NAME): N trial(s) in pool POOL`` got the pool on a line of its
    own; a terminal wraps a long line itself."""
    out = err_console if err else console
    out.print(visible(text, keep="\n\t"), markup=False, emoji=False, soft_wrap=soft_wrap)


def one_line(value: Any) -> str:
    """A stored value as one line of plain text: every control character escaped."""
    return visible(str(value))


def log_line(line: str) -> str:
    """A line of a trial's output, as printed: control characters escaped but tab (ESC
    colour codes included: they show as ``\x1b[31m``), so a trial cannot drive the terminal
    of whoever reads its logs (every user may)."""
    return visible(line, keep="\t")


def cell(value: Any) -> Text:
    """A value as literal text for a table or panel; a ``Text`` (a styled state) is kept."""
    return value if isinstance(value, Text) else Text(one_line(value))


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
    "STOPPING": "dim",
    "STOPPED": "dim",
    "ACTIVE": "cyan",
}


def state(value: Any) -> Text:
    """The state, coloured if it is one we know; whatever the API sent, shown literally."""
    text = one_line(value or "-")
    return Text(text, style=_STATE_STYLE.get(text.upper(), ""))


def _col(column: Column, first: bool) -> Col:
    if isinstance(column, Col):
        return column
    return Col(column[0], column[1], fit="keep" if first else "cut")


def _fit(cols: list[Col], cells: list[list[Text]], width: int) -> tuple[list[Col], list[int]]:
    """The columns to show and each one's width, so the table fits ``width`` if it can:
    cut and wrap columns give up width first, then droppable columns go."""
    natural = [
        max([Text(c.header).cell_len] + [row[n].cell_len for row in cells])
        for n, c in enumerate(cols)
    ]
    shown = list(range(len(cols)))
    while True:
        widths = {i: natural[i] for i in shown}
        floor = {
            i: natural[i]
            if cols[i].fit == "keep"
            else min(
                natural[i], max(len(cols[i].header), MIN_WRAP if cols[i].fit == "wrap" else MIN_CUT)
            )
            for i in shown
        }
        excess = sum(widths.values()) + GAP * (len(shown) - 1) - width
        # Take the excess from the widest flexible columns first, down to their floors.
        while excess > 0:
            flexible = [i for i in shown if widths[i] > floor[i]]
            if not flexible:
                break
            widest = max(flexible, key=lambda i: widths[i] - floor[i])
            widths[widest] -= 1
            excess -= 1
        droppable = [i for i in shown if cols[i].drop]
        if excess <= 0 or not droppable:
            return [cols[i] for i in shown], [widths[i] for i in shown]
        shown.remove(min(droppable, key=lambda i: (cols[i].drop, -i)))


def table(title: str | None, columns: Sequence[Column], rows: Sequence[dict[str, Any]]) -> None:
    """Rows as a table that fits the terminal (80 columns included): headers and ids are
    never broken, long values are cut with "…" or wrapped at spaces, low-value columns go."""
    if not rows:
        echo(f"no {title.lower() if title else 'rows'}")
        return
    cols = [_col(c, n == 0) for n, c in enumerate(columns)]
    cells = [[cell(c.get(row)) for c in cols] for row in rows]
    shown, widths = _fit(cols, cells, console.width)
    index = [cols.index(c) for c in shown]
    out = Table(
        title=None if title is None else Text(one_line(title)),
        title_justify="left",
        show_edge=False,
        pad_edge=False,
        box=box.SIMPLE_HEAD,
        header_style="bold",
    )
    for c, w in zip(shown, widths, strict=True):
        out.add_column(
            c.header,
            width=w,
            no_wrap=c.fit != "wrap",
            overflow="fold" if c.fit == "wrap" else "ellipsis",
        )
    for row in cells:
        out.add_row(*(row[i] for i in index))
    console.print(out)


def fields(title: str, pairs: Sequence[tuple[str, Any]]) -> None:
    out = Table(
        title=Text(one_line(title)), title_justify="left", show_header=False, show_edge=False
    )
    out.add_column(style="bold")
    out.add_column(overflow="fold")
    for key, value in pairs:
        out.add_row(Text(key), cell("-" if value is None or value == "" else value))
    console.print(out)


_ARN_PRINCIPAL = re.compile(r"^arn:aws[a-z-]*:(?:iam|sts)::\d{12}:(?:user|assumed-role|role)/(.+)$")


def principal(name: str | None) -> str:
    """A principal name short enough for a table cell: an IAM ARN without its common prefix
    (``alice``, ``Admin/alice@example.com``); other names (emails, local users) as they are.
    ``describe`` and ``--json`` show the whole name."""
    if not name:
        return "-"
    match = _ARN_PRINCIPAL.match(name)
    return match.group(1) if match else name


def by_state(counts: dict[str, int] | None) -> str:
    return ", ".join(f"{n} {s.lower()}" for s, n in sorted((counts or {}).items()) if n) or "-"


def hparams(values: Mapping[str, Any] | None) -> str:
    """Hyperparameters on one line: ``batch_size=32 lr=0.05`` (keys sorted, values as JSON,
    strings bare)."""
    return (
        " ".join(
            f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'))}"
            for k, v in sorted((values or {}).items())
        )
        or "-"
    )


def metric(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def metric_values(values: Mapping[str, float] | None) -> str:
    return " ".join(f"{k}={v:.4g}" for k, v in sorted((values or {}).items())) or "-"


TRIAL_COLUMNS: list[Column] = [
    Col("TRIAL", lambda t: t.get("id"), fit="keep"),
    Col("STATE", lambda t: state(t.get("state")), fit="keep"),
    Col(
        "ON",
        lambda t: ",".join(p.get("instance_id", "") for p in t.get("placement") or []) or "-",
        drop=1,
    ),
    Col("SLOTS", lambda t: t.get("slots"), fit="keep", drop=3),
    Col("PREEMPT", lambda t: t.get("preemptions", 0), fit="keep", drop=2),
    Col(
        "RESTARTS",
        lambda t: f"{t.get('restarts', 0)}/{t.get('max_restarts', '-')}",
        fit="keep",
        drop=4,
    ),
    Col("COST", lambda t: money(t.get("cost_usd")), fit="keep", drop=5),
    Col("BEST", lambda t: metric(t.get("best_value")), fit="keep", drop=6),
    Col("HYPERPARAMS", lambda t: hparams(t.get("hyperparameters"))),
    Col("WHY PENDING", lambda t: t.get("pending_reason") or "", fit="wrap"),
]
