"""Where the idle GPU-hours of a run go, by cause, and the share bought on-demand.

Every paid GPU-second of an instance (billed from ``running`` to termination) is either used
by a trial or idle for one of four causes:

- **boot**: from billing start until the agent registered (OS, drivers, image, agent); an
  instance that never registered is boot for all of its paid time;
- **gang**: an agent launched for a gang (a trial larger than the instance), idle from its
  registration until its first work: it waits for the other members to boot;
- **reaping**: the whole agent idle after registration otherwise (waiting for work or for
  the reaper, draining, the 60-second billing minimum);
- **fragmentation**: free GPUs of an agent that runs something (a 1-GPU trial alone on an
  8-GPU agent leaves 7 idle).

The four add up to paid minus used GPU-hours (``SimMetrics.idle_gpu_hours``) up to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.sim.engine import Replay
from corral.sim.workers import AgentLog

HOUR_S = 3600.0


@dataclass(frozen=True)
class IdleBreakdown:
    boot_gpu_h: float = 0.0
    gang_gpu_h: float = 0.0
    reaping_gpu_h: float = 0.0
    fragmented_gpu_h: float = 0.0

    def __add__(self, other: IdleBreakdown) -> IdleBreakdown:
        return IdleBreakdown(
            self.boot_gpu_h + other.boot_gpu_h,
            self.gang_gpu_h + other.gang_gpu_h,
            self.reaping_gpu_h + other.reaping_gpu_h,
            self.fragmented_gpu_h + other.fragmented_gpu_h,
        )

    @property
    def total_gpu_h(self) -> float:
        return self.boot_gpu_h + self.gang_gpu_h + self.reaping_gpu_h + self.fragmented_gpu_h


@dataclass(frozen=True)
class Paid:
    """One instance's billed interval (seconds on the run's clock)."""

    cloud_id: str
    start: float
    end: float
    gpus: int
    usd: float
    on_demand: bool

    @property
    def gpu_h(self) -> float:
        return (self.end - self.start) * self.gpus / HOUR_S


def paid_instances(replay: Replay) -> list[Paid]:
    """Every billed run the replay paid for (one per launch, and one per start of a stopped
    instance), with its billed interval and its compute cost (disks of stopped instances are
    in the run's cost, not here: no GPU is paid for while stopped)."""
    found = []
    for ci in replay.cloud.all_instances():
        offering = replay.offerings.get(ci.cloud_id)
        if offering is None or offering[1] <= 0:
            continue
        slots, price = offering
        for start, end in replay.cloud.billed_runs(ci.cloud_id, replay.end):
            usd = (end - start) * price / HOUR_S
            on_demand = ci.cloud_id in replay.on_demand
            found.append(Paid(ci.cloud_id, start, end, slots, usd, on_demand))
    return found


def _life(paid: Paid, lives: list[AgentLog]) -> AgentLog | None:
    """The agent log of the life this billed run carried: registered before it ended and
    after it began (its boot started before ``paid.start``, its registration after)."""
    return next((log for log in lives if paid.start <= log.registered_at <= paid.end), None)


def instance_idle(paid: Paid, log: AgentLog | None) -> IdleBreakdown:
    """The idle GPU-seconds of one instance by cause, in GPU-hours."""
    g = paid.gpus
    registered = min(max(log.registered_at, paid.start), paid.end) if log else paid.end
    seconds = {"boot": g * (registered - paid.start), "gang": 0.0, "reaping": 0.0, "frag": 0.0}
    if log is not None:
        used, t, worked = 0, registered, False
        changes = sorted(log.changes, key=lambda c: c[0])
        for at, delta in [*changes, (paid.end, 0)]:
            until = min(max(at, registered), paid.end)
            if used == 0:
                seconds["gang" if log.for_gang and not worked else "reaping"] += g * (until - t)
            else:
                seconds["frag"] += max(g - used, 0) * (until - t)
            used += delta
            worked = worked or delta > 0
            t = until
    return IdleBreakdown(*(seconds[k] / HOUR_S for k in ("boot", "gang", "reaping", "frag")))


def idle_breakdown(replay: Replay) -> IdleBreakdown:
    total = IdleBreakdown()
    for paid in paid_instances(replay):
        total = total + instance_idle(paid, _life(paid, replay.agent_logs.get(paid.cloud_id, [])))
    return total


def on_demand_share(paid: list[Paid]) -> float:
    """Share of the paid GPU-hours that were on-demand instances (0 to 1)."""
    total = sum(p.gpu_h for p in paid)
    return sum(p.gpu_h for p in paid if p.on_demand) / total if total > 0 else 0.0
