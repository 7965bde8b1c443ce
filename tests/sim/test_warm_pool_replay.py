"""The simulator with a warm pool, on a trace small enough to follow by hand: two one-GPU
jobs far apart. Without a warm pool the second waits a fresh boot; with one it waits a start
of the stopped instance, which is paid for by its disks while stopped."""

from __future__ import annotations

import pytest

from corral.domain.instance import InstanceState
from corral.domain.policy import StaticPool
from corral.services.shared.service_context import DomainPolicy
from corral.sim.engine import Engine, Replay
from corral.sim.idle import idle_breakdown, paid_instances
from corral.sim.metrics import SimMetrics, measure
from corral.sim.model import BootModel
from corral.sim.policies import SimPolicy
from corral.sim.trace import Job, Trace

from .helpers import ONE, QUIET

H = 3600.0
DISKS_USD_H = 0.36  # $0.0001 a second while stopped (high, to be visible in the sums)
WARM = QUIET.model_copy(update={"warm_start": BootModel(mean=20.0, jitter=0.0, pending=5.0)})
# Idle from 660 s: stopped into the warm pool on the reaper pass after 660 + 120 s (the
# minimum park idle; its 60 s boot is shorter), well before the second job at 3000 s.
JOBS = [Job(0, 1, 600, "a"), Job(3000, 1, 600, "b")]


def replay(size: int, jobs: list[Job] = JOBS) -> tuple[SimMetrics, Replay]:
    pool = StaticPool(
        "gpu", (ONE,), max_instances=10, max_idle_s=300.0, warm_pool_size=size, max_stopped_s=H
    )
    policy = SimPolicy(
        "corral", DomainPolicy(), True, {"gpu": pool}, "gpu", (ONE,), {"gpu": DISKS_USD_H}
    )
    ran = Engine(WARM, Trace(tuple(jobs)), policy, 0).run()
    return measure(ran, policy.offerings), ran


def waits(ran: Replay) -> dict[str, float]:
    return {r.job.name: (r.first_start or 0.0) - r.job.submit_s - ran.start for r in ran.jobs}


def test_the_second_job_waits_a_warm_start_not_a_boot() -> None:
    metrics, ran = replay(1)
    assert metrics.completed == 2
    assert waits(ran) == {"a": pytest.approx(QUIET.boot.mean), "b": pytest.approx(20.0)}
    assert metrics.instances_launched == 1
    assert ran.cloud.api_calls["launch"] == 1 and ran.cloud.api_calls["start"] == 1

    cold_metrics, cold = replay(0)
    assert waits(cold)["b"] == pytest.approx(QUIET.boot.mean)
    assert cold_metrics.instances_launched == 2
    assert cold.cloud.api_calls["start"] == 0
    assert cold_metrics.stopped_disk_usd == 0.0


def test_each_billed_run_is_paid_once_and_the_disks_in_between() -> None:
    metrics, ran = replay(1)
    (cloud_id,) = ran.offerings
    runs = ran.cloud.billed_runs(cloud_id, ran.end)
    assert len(runs) == 2
    paid = paid_instances(ran)
    assert [(p.cloud_id, p.start, p.end) for p in paid] == [(cloud_id, s, e) for s, e in runs]
    # The second run is billed from the start's running (after its pending phase).
    assert runs[1][0] == pytest.approx(ran.start + 3000 + WARM.warm_start.pending)
    compute = sum(p.usd for p in paid)
    disks = ran.cloud.stopped_usd(cloud_id, ran.end)
    assert disks > 0
    assert metrics.stopped_disk_usd == pytest.approx(disks, abs=0.005)
    assert metrics.cost_usd == pytest.approx(compute + disks, abs=0.01)
    # Disks paid only while stopped: the gaps between the runs and after the last one,
    # until it is terminated (max_stopped_period) or the replay ends.
    stopped_s = (runs[1][0] - WARM.warm_start.pending - runs[0][1]) + (ran.end - runs[1][1])
    assert disks == pytest.approx(stopped_s / H * DISKS_USD_H, rel=0.05)


def test_the_idle_breakdown_still_sums_to_paid_minus_used() -> None:
    metrics, ran = replay(1)
    (cloud_id,) = ran.offerings
    assert len(ran.agent_logs[cloud_id]) == 2  # one log per life
    found = idle_breakdown(ran)
    paid_gpu_h = sum(p.gpu_h for p in paid_instances(ran))
    assert found.total_gpu_h == pytest.approx(paid_gpu_h - metrics.gpu_hours_used, abs=0.005)
    # Each life's boot is its own: the launch's 60 s and the start's 15 s (registration
    # 20 s after the start call, billing from 5 s after it).
    boot_s = QUIET.boot.mean + (WARM.warm_start.mean - WARM.warm_start.pending)
    assert found.boot_gpu_h == pytest.approx(boot_s / H)
    assert found.gang_gpu_h == found.fragmented_gpu_h == 0.0


def test_a_stopped_instance_expires_and_the_replay_ends() -> None:
    metrics, ran = replay(1, JOBS[:1])
    (cloud_id,) = ran.offerings
    assert ran.cloud.api_calls["start"] == 0
    found = ran.cloud.get(cloud_id)
    assert found is not None and found.state.is_gone
    # Stopped about 840 s in, kept for max_stopped_period (an hour), then terminated.
    (run,) = ran.cloud.billed_runs(cloud_id, ran.end)
    assert ran.end - run[1] == pytest.approx(H, abs=120.0)
    assert metrics.stopped_disk_usd == pytest.approx(DISKS_USD_H, abs=0.02)


class Watching(Engine):
    """The engine, noting every stopped instance whose simulated agent still runs."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.alive_while_stopped: list[str] = []

    def _timers(self, now: float) -> None:
        super()._timers(now)
        for record in self.store.instances(states={InstanceState.STOPPED}):
            agent = self.workers.agents.get(record.cloud_id or "")
            if agent is not None and agent.alive:
                self.alive_while_stopped.append(record.id)


def test_a_stopped_instance_s_agent_is_gone_until_it_is_started_again() -> None:
    pool = StaticPool("gpu", (ONE,), max_idle_s=300.0, warm_pool_size=1, max_stopped_s=H)
    policy = SimPolicy("corral", DomainPolicy(), True, {"gpu": pool}, "gpu", (ONE,))
    engine = Watching(WARM, Trace(tuple(JOBS)), policy, 0)
    ran = engine.run()
    assert ran.cloud.api_calls["start"] == 1
    assert engine.alive_while_stopped == []
