"""Stopping a process and everything it started.

Trials run in their own sessions (so a signal to the agent's group does not reach them), so
process groups are not enough: the tree is read from ``/proc`` (Linux; elsewhere only the
process itself is signalled).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from corral.local.state import pid_alive


def _parents() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parens, so split after it.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            out[int(entry.name)] = int(fields[1])
    return out


def session_members(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid``: what an emulated machine's boot
    started, even after its shell exited and they were re-parented."""
    found: list[int] = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # After "(comm)": state ppid pgrp session ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 3 and fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry.name))
    return found


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, children before grandchildren."""
    parents = _parents()
    found: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop(0)
        kids = [p for p, parent in parents.items() if parent == current]
        found.extend(kids)
        frontier.extend(kids)
    return found


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_tree(pid: int, grace_s: float = 3.0, *, graceful: bool = True) -> list[int]:
    """SIGTERM the process and its descendants (unless ``graceful`` is False), wait up to
    ``grace_s``, then SIGKILL whatever is left. Returns the pids that were signalled."""
    tree = [pid, *descendants(pid)]
    if graceful:
        _signal(tree, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(pid_alive(p) for p in tree):
            # Children forked during the grace period are still ours to stop.
            tree = list(dict.fromkeys([*tree, *descendants(pid)]))
            time.sleep(0.05)
    tree = list(dict.fromkeys([*tree, *descendants(pid)]))
    _signal([p for p in tree if pid_alive(p)], signal.SIGKILL)
    return tree
