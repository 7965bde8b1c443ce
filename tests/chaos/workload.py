"""The users: a seeded mix of experiments (1 to 8 trials of 1, 2, 4 or 8 GPUs; 8 is a gang
over two 4-GPU instances) and commands, arriving over the first hour, some held back until
an instance drains, some killed by their user while they run. Every request goes through
the real ``api`` handler with a user token; a failed call is retried (submissions with the
same client token, so a retry never makes a second experiment)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from corral.adapters.memory import FakeClock
from tests.chaos.aws import POOL, USER_TOKEN
from tests.chaos.config import SoakConfig
from tests.chaos.lambdas import Gateway, Unreachable
from tests.chaos.trials import EXIT_CODES, TrialSpec

SLOTS = ((1, 0.55), (2, 0.20), (4, 0.15), (8, 0.10))


@dataclass
class Job:
    index: int
    slots: int
    specs: list[TrialSpec]
    command: bool
    at: float | None  # seconds after the start; None: when an instance drains
    kill_after: float | None = None
    max_restarts: int = 2
    experiment_id: str | None = None
    submitted_at: float | None = None
    killed_at: float | None = None
    trial_ids: list[str] = field(default_factory=list)

    def request(self) -> tuple[str, dict[str, Any]]:
        token = f"chaos-job-{self.index:04d}"
        resources = {"slots_per_trial": self.slots, "resource_pool": POOL}
        if self.command:
            argv = ["sim-trial", self.specs[0].text()]
            return "/commands", {
                "config": {"resources": resources},
                "argv": argv,
                "client_token": token,
            }
        config = {
            "name": f"chaos-{self.index}",
            "entrypoint": ["sim-trial"],
            "resources": resources,
            "hyperparameters": {
                "spec": {"type": "categorical", "vals": [s.text() for s in self.specs]}
            },
            "searcher": {"name": "grid", "metric": "loss"},
            "max_restarts": self.max_restarts,
            "checkpoint_storage": {"type": "s3", "bucket": "chaos-checkpoints"},
        }
        return "/experiments", {"config": config, "client_token": token}

    def expected_exit(self, spec: TrialSpec) -> int:
        """The exit code the trial ends with if left alone."""
        if spec.behaviour == "flaky" and (self.command or self.max_restarts == 0):
            return 1
        return 0 if spec.behaviour in ("ok", "flaky") else EXIT_CODES[spec.behaviour]


def make_jobs(cfg: SoakConfig) -> list[Job]:
    rng = random.Random(cfg.seed * 13 + 7)
    jobs: list[Job] = []
    total = 0
    while total < cfg.trials:
        command = rng.random() < 0.08
        slots = rng.choices([s for s, _ in SLOTS], [w for _, w in SLOTS])[0]
        count = 1 if command else rng.randint(1, 2 if slots == 8 else 8)
        count = min(count, max(1, cfg.trials - total))
        specs: list[TrialSpec] = []
        for _ in range(count):
            behaviour = rng.choices(["ok", "flaky", "bad"], [0.85, 0.09, 0.06])[0]
            duration = round(rng.uniform(cfg.min_duration_s, cfg.max_duration_s))
            specs.append(TrialSpec(f"k{total + len(specs)}", duration, behaviour))
        held = cfg.on("drain_arrivals") and rng.random() < cfg.rates.drain_arrivals
        at = (
            None
            if held
            else (rng.uniform(0, 60) if rng.random() < 0.6 else rng.uniform(0, cfg.spread_s))
        )
        job = Job(len(jobs), slots, specs, command, at)
        if cfg.on("user_kill") and rng.random() < cfg.rates.user_kill:
            job.kill_after = rng.uniform(60.0, 600.0)
        jobs.append(job)
        total += count
    return jobs


class Users:
    def __init__(self, jobs: list[Job], gateway: Gateway, clock: FakeClock, start: float) -> None:
        self.jobs, self.gateway, self.clock, self.start = jobs, gateway, clock, start
        self.counts: Counter[str] = Counter()
        self.refusals: list[str] = []

    def step(self, draining: bool) -> None:
        now = self.clock.now()
        for job in self.jobs:
            if job.experiment_id is None:
                due = job.at is not None and now >= self.start + job.at
                if due or (job.at is None and draining):
                    self._submit(job)
            elif self._kill_due(job, now):
                self._kill(job)

    @staticmethod
    def _kill_due(job: Job, now: float) -> bool:
        if job.kill_after is None or job.killed_at is not None or job.submitted_at is None:
            return False
        return now >= job.submitted_at + job.kill_after

    def all_submitted(self) -> bool:
        return all(j.experiment_id is not None for j in self.jobs)

    def release_held(self) -> None:
        """Nothing drained in time: the held-back jobs arrive now."""
        for job in self.jobs:
            if job.at is None:
                job.at = self.clock.now() - self.start

    def _call(self, path: str, body: Any) -> tuple[int, Any] | None:
        try:
            status, reply = self.gateway.request("POST", path, body, USER_TOKEN)
        except Unreachable:
            self.counts["retried (API unreachable)"] += 1
            return None
        if status >= 500:
            self.counts[f"retried (HTTP {status})"] += 1
            return None
        return status, reply

    def _submit(self, job: Job) -> None:
        path, body = job.request()
        answer = self._call(path, body)
        if answer is None:
            return
        status, reply = answer
        if status >= 400:
            self.refusals.append(f"job {job.index}: {path} refused with {status}: {reply}")
            job.experiment_id = f"refused-{job.index}"
            return
        job.experiment_id = reply["id"]
        job.trial_ids = [t["id"] for t in reply.get("trials", [])]
        job.submitted_at = self.clock.now()
        self.counts["submitted"] += 1
        self.counts["submitted while draining" if job.at is None else "submitted on time"] += 1

    def _kill(self, job: Job) -> None:
        answer = self._call(f"/experiments/{job.experiment_id}/kill", None)
        if answer is None:
            return
        status, reply = answer
        if status >= 400:
            self.refusals.append(f"job {job.index}: kill refused with {status}: {reply}")
        job.killed_at = self.clock.now()
        self.counts["killed by user"] += 1
