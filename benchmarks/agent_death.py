"""Agent death to requeue, and to the dead agent's instance being terminated.

The real services (``run_idle_reap``, ``run_reconcile``, the schedule pass, the agent
protocol) on the in-memory adapters, driven by a fake clock: nothing sleeps, and every run
is the same. One agent runs one trial; right after a heartbeat it dies (the instance keeps
running, as when the agent process is killed or the instance is cut off). The timers fire
at the rates ``infra/template.yaml`` gives them, on a fixed cadence, so where the death
falls between two ticks matters: the death is placed at every 5-second phase of the
longest timer period, and the figures are over those phases. Times come from the records'
own history: when the trial was requeued (left RUNNING), and when the instance was declared
LOST and sent to termination (TERMINATING).

    .venv/bin/python benchmarks/agent_death.py                    # this tree
    PYTHONPATH=/tmp/before/functions:/tmp/before \\
        .venv/bin/python benchmarks/agent_death.py                # another tree, e.g. main

(``git archive <commit> functions tests infra | tar -x -C /tmp/before`` makes one.) The
script only uses what both trees have, so the same file measures before and after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Appended, not prepended: a PYTHONPATH naming another tree (the "before" figures) wins.
ROOT = Path(__file__).resolve().parents[1]
sys.path.extend([str(ROOT / "functions"), str(ROOT)])

import corral  # noqa: E402
from corral.domain.instance import InstanceState  # noqa: E402
from corral.domain.trial import TrialState  # noqa: E402
from corral.local.template import parse_template, rate_seconds  # noqa: E402
from corral.services.idle_reap import run_idle_reap  # noqa: E402
from corral.services.reconcile import run_reconcile  # noqa: E402
from tests.services.harness import Cluster, Script, make_pool  # noqa: E402

STEP_S = 1.0  # clock resolution after the death
PHASE_STEP_S = 5.0  # the agent heartbeats every 5 s: deaths fall on that grid
GIVE_UP_S = 1800.0


def timer_periods(template_path: Path) -> dict[str, float]:
    """The template's schedule rates, per function (seconds)."""
    template = parse_template(template_path.read_text())
    periods: dict[str, float] = {}
    for name, resource in template["Resources"].items():
        for event in resource.get("Properties", {}).get("Events", {}).values():
            if event.get("Type") == "Schedule":
                rate = rate_seconds(str(event["Properties"]["Schedule"]))
                if rate is not None:
                    periods[name] = rate
    return periods


def one_death(phase_s: float, reap_s: float, reconcile_s: float) -> dict[str, float]:
    """Seconds from the agent's death (right after its last heartbeat) to each milestone."""
    cluster = Cluster(make_pool())
    cluster.schedule_every_s = reap_s  # the schedule timer's rate is the reaper's (1 min)
    trial_id = cluster.submit_scripted(Script(duration_s=100_000))
    cluster.pump()
    epoch = cluster.clock.now()  # the timers' cadence starts here
    timers: list[tuple[float, Callable[[Any], Any]]] = [
        (reap_s, run_idle_reap),
        (reconcile_s, run_reconcile),
    ]

    def fire_due(now: float) -> None:
        for period, run in timers:
            if (now - epoch) % period < STEP_S / 2:
                run(cluster.ctx)

    warm_up = 4 * max(reap_s, reconcile_s)  # boot, register, run: settled long before
    while cluster.clock.now() - epoch < warm_up + phase_s:
        cluster.step(PHASE_STEP_S)
        fire_due(cluster.clock.now())
    assert cluster.trial(trial_id).state is TrialState.RUNNING, "the trial never ran"
    (record,) = [r for r in cluster.instances() if trial_id in r.trial_ids]
    assert record.cloud_id is not None
    died = cluster.clock.now()
    cluster.agents[record.cloud_id].alive = False
    while cluster.clock.now() - died < GIVE_UP_S:
        cluster.step(STEP_S)
        fire_due(cluster.clock.now())
        current = cluster.store.get_instance(record.id)
        assert current is not None
        if current.entered_at(InstanceState.TERMINATING) is not None:
            break
    trial = cluster.trial(trial_id)
    current = cluster.store.get_instance(record.id)
    assert current is not None
    requeued = min(
        (h.at for h in trial.history if h.at > died and h.state != TrialState.RUNNING.value),
        default=float("nan"),
    )
    lost = current.entered_at(InstanceState.LOST)
    terminating = current.entered_at(InstanceState.TERMINATING)
    return {
        "requeued": requeued - died,
        "lost": (lost if lost is not None else float("nan")) - died,
        "terminating": (terminating if terminating is not None else float("nan")) - died,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--template",
        type=Path,
        default=Path(corral.__file__).resolve().parents[2] / "infra" / "template.yaml",
    )
    args = parser.parse_args()
    periods = timer_periods(args.template)
    reap_s = periods["IdleReapFunction"]
    reconcile_s = periods["SpotReconcileFunction"]
    cycle = max(reap_s, reconcile_s)
    phases = [n * PHASE_STEP_S for n in range(int(cycle // PHASE_STEP_S))]
    runs = [one_death(p, reap_s, reconcile_s) for p in phases]

    from corral.services.shared.service_context import ServiceSettings

    settings = ServiceSettings()
    print(f"code: {Path(corral.__file__).resolve().parents[1]}")
    print(
        f"timers: idle_reap every {reap_s:.0f} s, spot_reconcile every {reconcile_s:.0f} s; "
        f"heartbeat timeout {settings.reconcile.heartbeat_timeout_s:.0f} s, agent fence "
        f"{settings.fence_after_s:.0f} s"
    )
    print(f"{len(runs)} deaths, one per {PHASE_STEP_S:.0f} s phase of the {cycle:.0f} s cycle")
    print(f"{'from the agent death to':<34}{'min':>8}{'mean':>8}{'max':>8}")
    for key, label in [
        ("requeued", "the trial requeued"),
        ("lost", "the instance declared LOST"),
        ("terminating", "the instance sent to termination"),
    ]:
        values = [r[key] for r in runs]
        print(
            f"{label:<34}{min(values):>7.0f}s{statistics.fmean(values):>7.0f}s{max(values):>7.0f}s"
        )


if __name__ == "__main__":
    main()
