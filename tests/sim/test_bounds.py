"""The packing bound: what any policy pays at least when jobs start on arrival."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.domain.config import load_cluster_config
from corral.domain.offerings import CapacityType, Offering
from corral.sim.bounds import cover_costs, packing_bound_usd
from corral.sim.model import simulation_config
from corral.sim.runner import build_policy, simulate
from corral.sim.trace import Job, read_trace


def offering(slots: int, price: float, name: str = "x") -> Offering:
    return Offering(name, "subnet-1", CapacityType.SPOT, slots, price)


def job(submit: float, gpus: int, hours: float) -> Job:
    return Job(submit_s=submit, gpus=gpus, duration_s=hours * 3600, name=f"j{submit}")


FOUR = [offering(4, 4.0)]  # 1 USD per GPU-hour, sold four at a time


def test_a_lone_small_job_pays_for_the_whole_instance() -> None:
    assert packing_bound_usd([job(0, 1, 2)], FOUR) == pytest.approx(8.0)


def test_overlapping_small_jobs_share_an_instance() -> None:
    jobs = [job(0, 1, 2), job(0, 3, 2)]
    assert packing_bound_usd(jobs, FOUR) == pytest.approx(8.0)


def test_the_bound_follows_the_running_gpus_over_time() -> None:
    # 0-1 h: 5 GPUs (two instances); 1-2 h: 1 GPU (one instance); then nothing.
    jobs = [job(0, 1, 2), job(0, 4, 1)]
    assert packing_bound_usd(jobs, FOUR) == pytest.approx(8.0 + 4.0)


def test_a_gap_between_jobs_costs_nothing() -> None:
    jobs = [job(0, 4, 1), job(5 * 3600, 4, 1)]
    assert packing_bound_usd(jobs, FOUR) == pytest.approx(8.0)


def test_the_cheapest_mix_of_shapes_covers_the_gpus() -> None:
    shapes = [offering(1, 1.5, "one"), offering(4, 4.0, "four"), offering(8, 7.0, "eight")]
    costs = cover_costs(shapes, 10)
    assert costs[0] == 0.0
    assert costs[1] == pytest.approx(1.5)  # one 1-GPU instance
    assert costs[3] == pytest.approx(4.0)  # a 4-GPU one beats three 1-GPU ones
    assert costs[8] == pytest.approx(7.0)
    assert costs[9] == pytest.approx(8.5)  # eight plus one
    assert costs[10] == pytest.approx(10.0)  # eight plus two ones (a four: 11)


def test_it_is_never_below_the_oracle_of_single_gpus() -> None:
    jobs = [job(0, 3, 1.5), job(1800, 6, 1), job(2 * 3600, 16, 0.5)]
    work_usd = sum(j.gpus * j.duration_s for j in jobs) / 3600 * 1.0
    assert packing_bound_usd(jobs, FOUR) >= work_usd


def test_no_offering_with_gpus_is_an_error() -> None:
    with pytest.raises(ValueError, match="no priced offering"):
        packing_bound_usd([job(0, 1, 1)], [offering(0, 1.0)])


def test_a_job_ending_as_another_starts_needs_no_second_instance() -> None:
    jobs = [job(0, 4, 1), job(3600, 4, 1)]
    assert packing_bound_usd(jobs, FOUR) == pytest.approx(8.0)


def test_jobs_without_gpus_or_time_cost_nothing() -> None:
    jobs = [job(0, 0, 1), job(0, 2, 0), job(100, 1, 1)]
    assert packing_bound_usd(jobs, FOUR) == pytest.approx(4.0)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ONE_SHAPE = """
default_resource_pool: v100x4
resource_pools:
  - name: v100x4
    provider:
      type: aws
      region: us-east-1
      image_id: ami-0123456789abcdef0
      instance_type: p3.8xlarge
      spot: true
      max_instances: 20
      network_interface: {subnet_id: subnet-0aaa1111}
"""


@pytest.mark.parametrize("cluster_text", ["sim-cluster", "one-shape"])
def test_both_simulated_policies_pay_at_least_the_bound(cluster_text: str) -> None:
    # The property the benchmark rests on: every policy the simulator replays starts jobs
    # no earlier than their arrival, so none pays less than the bound.
    source = EXAMPLES / "sim-cluster.yaml" if cluster_text == "sim-cluster" else ONE_SHAPE
    cluster = load_cluster_config(source).config
    trace = read_trace(EXAMPLES / "tiny-trace.csv")
    for policy in ("corral", "determined"):
        metrics, replay = simulate(cluster, trace, policy, seed=3)
        offerings = build_policy(policy, cluster, simulation_config(cluster.simulation), 3)
        bound = packing_bound_usd([r.job for r in replay.jobs], offerings.offerings)
        assert metrics.oracle_cost_usd <= bound + 0.01 <= metrics.cost_usd + 0.01
