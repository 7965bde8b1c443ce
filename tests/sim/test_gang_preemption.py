"""A gang member's spot notice: the other members' agents let the trial go at once."""

from __future__ import annotations

from corral.domain.offerings import CapacityType, Offering
from corral.domain.policy import StaticPool
from corral.services.shared.service_context import DomainPolicy
from corral.sim.engine import START, Engine, Replay
from corral.sim.policies import SimPolicy
from corral.sim.trace import Job, Trace

from .helpers import QUIET

ONE_SPOT = Offering("g.1", "zone-a", CapacityType.SPOT, 1, 0.3)
NOTICE_AT = 1000.0  # seconds into the run; a 1-GPU job submitted then makes it an event


class NoticeToRankZero(Engine):
    """Interrupts rank 0 of the 2-GPU gang once, at ``NOTICE_AT``."""

    noticed: bool = False

    def _settle_cloud(self, now: float) -> None:
        if not self.noticed and now >= START + NOTICE_AT:
            gang = self.workers.jobs[self._trial_of("gang")]
            assert len(gang.agents) == 2, "the gang runs on two 1-GPU agents"
            # Rank 1's periodic heartbeat (every 5 s for a real agent) reports the run: the
            # control plane then keeps the trial PREEMPTED on its GPU until it stops there.
            self.workers.heartbeat(self.workers.agents[gang.agents[1]])
            self.cloud.interrupt(gang.agents[0], notice_s=120.0)
            self.noticed = True
        super()._settle_cloud(now)

    def _trial_of(self, name: str) -> str:
        return next(t for t, run in self.workers.jobs.items() if run.job.name == name)


def replay() -> Replay:
    pool = StaticPool("gpu", (ONE_SPOT,), max_instances=10, max_idle_s=300.0)
    chosen = SimPolicy("corral", DomainPolicy(), True, {"gpu": pool}, "gpu", (ONE_SPOT,))
    jobs = (Job(0, 2, 3600, "gang"), Job(NOTICE_AT, 1, 60, "marker"))
    return NoticeToRankZero(QUIET, Trace(jobs), chosen, 0).run()


def test_the_surviving_member_stops_with_the_noticed_one_and_the_gang_resumes() -> None:
    found = replay()
    gang = next(run for run in found.jobs if run.job.name == "gang")
    assert gang.completed_at is not None
    # Boot 60 s, run to the notice at 1000 s (checkpointed on the way out: 940 s done),
    # requeued at once, its replacement boots in 60 s (plus at most a schedule tick): the
    # remaining 2,660 s end by about 3,720 s + 120 s. Held PREEMPTED on the surviving agent
    # until something else made that agent heartbeat, it resumed hours later or never.
    assert gang.completed_at - START <= NOTICE_AT + 60 + 120 + (3600 - 940)
    assert gang.lost_gpu_s == 0.0
