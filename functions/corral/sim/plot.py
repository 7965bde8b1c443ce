"""``corral sim --plot``: GPUs demanded vs GPUs paid over time, and the wait distribution.

matplotlib is imported here, lazily, so the simulator runs without it (``corral[sim]``).
"""

from __future__ import annotations

import os
from itertools import accumulate
from pathlib import Path
from types import ModuleType

from corral.sim.engine import Replay
from corral.sim.metrics import SimMetrics, paid_intervals

DAY_S = 86400.0
MAX_POINTS = 4000


# Formats matplotlib lists that need more than matplotlib: pgf runs a LaTeX installation.
_NEEDS_MORE = frozenset({"pgf"})


class PlotUnavailable(RuntimeError):
    pass


def _pyplot() -> ModuleType:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'corral[sim]'") from exc
    return plt


def formats() -> list[str]:
    """The file extensions ``--plot`` can write (the format is the extension)."""
    _pyplot()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return sorted(set(FigureCanvasAgg.get_supported_filetypes()) - _NEEDS_MORE)


def target_problems(path: Path) -> list[str]:
    """What is wrong with ``--plot PATH``, checked before a simulation that may run for
    minutes. matplotlib picks the format from the extension and, when there is none,
    *appends* ``.png``: ``--plot some/dir`` wrote ``some/dir.png``, outside what was named,
    so the extension is required. Raises PlotUnavailable without matplotlib."""
    supported = formats()
    listed = ", ".join(f".{f}" for f in supported)
    if path.is_dir():
        return [
            f"--plot: {path} is a directory; name an image file in it (e.g. {path / 'sim.png'})"
        ]
    if path.suffix.lower().removeprefix(".") not in supported:
        got = f"{path.suffix!r}" if path.suffix else "none"
        return [
            f"--plot: {path}: the file must end in one of {listed} (the image format), got {got}"
        ]
    parent = path.parent
    if not parent.is_dir():
        return [f"--plot: {path}: no directory {parent}"]
    if not os.access(parent, os.W_OK):
        return [f"--plot: {path}: cannot write in {parent}"]
    return []


def step_series(
    intervals: list[tuple[float, float, int]], origin: float
) -> tuple[list[float], list[float]]:
    """(days, level) of a sum of [start, end) x amount intervals, as a step function."""
    deltas = sorted(
        [(start, amount) for start, _, amount in intervals]
        + [(end, -amount) for _, end, amount in intervals]
    )
    times = [(t - origin) / DAY_S for t, _ in deltas]
    levels = list(accumulate(d for _, d in deltas))
    stride = max(1, len(times) // MAX_POINTS)
    return times[::stride], [float(v) for v in levels[::stride]]


def plot(replay: Replay, metrics: SimMetrics, path: Path) -> None:
    plt = _pyplot()
    demanded = [
        (replay.start + r.job.submit_s, r.completed_at or replay.end, r.job.gpus)
        for r in replay.jobs
    ]
    paid = [(start, end, gpus) for start, end, gpus, _ in paid_intervals(replay)]
    waits = sorted(
        r.first_start - r.job.submit_s - replay.start for r in replay.jobs if r.first_start
    )
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), constrained_layout=True)
    for series, label in ((demanded, "GPUs demanded (waiting or running)"), (paid, "GPUs paid")):
        x, y = step_series(series, replay.start)
        top.step(x, y, where="post", label=label, linewidth=0.8)
    top.set_xlabel("days")
    top.set_ylabel("GPUs")
    top.set_title(
        f"{metrics.policy}: ${metrics.cost_usd:,.0f} "
        f"({metrics.cost_ratio:.3f} x oracle), idle {metrics.idle_gpu_hours:,.0f} GPU-h"
    )
    top.legend(loc="upper left")
    if waits:
        bottom.plot(waits, [i / len(waits) for i in range(1, len(waits) + 1)])
    bottom.set_xlabel("wait from submission to first start (s)")
    bottom.set_ylabel("fraction of jobs")
    bottom.set_title(
        f"waits: p50 {metrics.wait_p50_s:.0f}s, p95 {metrics.wait_p95_s:.0f}s, "
        f"max {metrics.wait_max_s:.0f}s"
    )
    # The format named explicitly, so matplotlib never appends an extension of its own.
    fig.savefig(path, dpi=110, format=path.suffix.lower().removeprefix("."))
    plt.close(fig)
