"""A resumed run first spends ``simulation.restart_overhead`` of its GPUs: its work (and its
periodic checkpoints) go on only after it, and the time is counted apart from lost work."""

from __future__ import annotations

from corral.sim.trace import Job
from corral.sim.workers import JobRun

INTERVAL = 600.0
OVERHEAD = 120.0


def resumed(done_s: float) -> JobRun:
    run = JobRun(Job(0.0, 2, 3600.0, "j"), "t", INTERVAL, done_s=done_s, first_start=0.0)
    run.run_start, run.overhead_s = 1000.0, OVERHEAD
    return run


def test_work_resumes_only_after_the_restart_time() -> None:
    run = resumed(done_s=600.0)
    assert run.progress(1000.0 + 60) == 0.0  # still loading its checkpoint
    assert run.progress(1000.0 + 500) == 380.0
    # Periodic checkpoints count from the end of the restart, not from the run's start.
    assert run.checkpointed(1000.0 + OVERHEAD + 599) == 600.0
    assert run.checkpointed(1000.0 + OVERHEAD + 600) == 1200.0


def test_a_stop_keeps_the_work_not_the_restart_time_and_counts_it_apart() -> None:
    run = resumed(done_s=600.0)
    run.end_run(1000.0 + 500, checkpoint_now=True)  # stopped with a checkpoint (SIGTERM)
    assert run.done_s == 600.0 + 380.0
    assert run.restart_gpu_s == 2 * OVERHEAD and run.lost_gpu_s == 0.0
    assert run.used_gpu_s == 2 * 500.0


def test_an_instance_lost_during_the_restart_loses_no_work_but_the_restart_is_paid() -> None:
    run = resumed(done_s=600.0)
    run.end_run(1000.0 + 60, checkpoint_now=False)
    assert run.done_s == 600.0 and run.lost_gpu_s == 0.0
    assert run.restart_gpu_s == 2 * 60.0
