"""Counting faults and recoveries, and printing a soak's result."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.chaos.soak import Result, Soak

# Faults that hit the whole system rather than one machine: recovered when the run ended
# with every trial where it should be, nothing stuck and nothing unexplained in a DLQ.
GLOBAL = ("crash", "dup", "late", "ec2", "outage", "heartbeat_drop", "user_kill", "foreign")
END_STATE = ("trial outcomes", "stuck trials", "unexplained dead letters")


def tally(soak: Soak, violations: dict[str, list[str]]) -> tuple[Counter[str], Counter[str]]:
    faults: Counter[str] = Counter()
    faults.update(soak.fleet.faults)
    faults["crash"] = sum(soak.crashes.injected.values())
    faults["dup"] = soak.mailbox.counts["duplicated"]
    faults["late"] = soak.mailbox.counts["delayed"]
    faults["ec2"] = sum(soak.w.launches.errors.values())
    faults["user_kill"] = soak.users.counts["killed by user"]
    faults["drain_arrivals"] = soak.users.counts["submitted while draining"]
    lines = [line for v in violations.values() for line in v]
    recovered: Counter[str] = Counter()
    for kind, cloud_id, trial_ids in soak.fleet.touched:
        if not any(cloud_id in line or any(t in line for t in trial_ids) for line in lines):
            recovered[kind] += 1
    end_ok = not any(violations[k] for k in END_STATE)
    for kind in (*GLOBAL, "drain_arrivals"):
        if end_ok:
            recovered[kind] = faults[kind]
    if end_ok and not violations["foreign instances touched"]:
        recovered["foreign"] = faults["foreign"]
    elif violations["foreign instances touched"]:
        recovered["foreign"] = 0
    return +faults, recovered


def details(soak: Soak) -> dict[str, Any]:
    return {
        "crash points": dict(soak.crashes.injected.most_common(8)),
        "ec2 errors": dict(soak.w.launches.errors),
    }


def render(result: Result, verbose: bool = False) -> str:
    f = result.figures
    out = [
        f"chaos soak: seed {f['seed']}, {f['trials']} trials in {f['jobs']} jobs, "
        f"faults: {', '.join(sorted(result.cfg.faults)) or 'none'}",
        f"simulated {f['simulated_s'] / 3600:.2f} h in {f['wall_s']:.0f} s; "
        f"{f['instances launched']} instances launched, at most {f['max live instances']} live; "
        f"{f['trial runs']} trial runs; {f['api calls']} API calls",
        "trial states: " + ", ".join(f"{k} {v}" for k, v in sorted(f["states"].items())),
        "faults injected / recovered:",
    ]
    for kind, n in sorted(result.faults.items()):
        out.append(f"  {kind:<24} {n:>5} / {result.recovered.get(kind, 0)}")
    for name, lines in result.violations.items():
        mark = "ok" if not lines else f"{len(lines)} VIOLATION(S)"
        out.append(f"check {name}: {mark}")
        shown = lines if verbose else lines[:10]
        out += [f"  - {line}" for line in shown]
        if len(lines) > len(shown):
            out.append(f"  ... {len(lines) - len(shown)} more (--verbose)")
    if result.warnings:
        out.append(f"warnings ({len(result.warnings)}):")
        out += [f"  ! {w}" for w in (result.warnings if verbose else result.warnings[:10])]
    out.append(f"violations: {result.count}")
    return "\n".join(out)
