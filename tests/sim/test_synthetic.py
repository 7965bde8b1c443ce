"""Synthetic Philly- and Helios-like workloads: the published statistics, seeding, arrival
patterns, and the ``corral sim --format synthetic-*`` entry point."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.sim.synthetic import HELIOS, PHILLY, WorkloadShape, describe, generate

CONFIG = str(Path(__file__).resolve().parents[2] / "examples" / "sim-cluster.yaml")


@pytest.mark.parametrize("shape", [PHILLY, HELIOS], ids=lambda s: s.name)
def test_matches_the_published_median_mean_and_gpus(shape: WorkloadShape) -> None:
    stats = describe(generate(shape, seed=3, jobs=3000))
    assert stats["median_s"] == pytest.approx(shape.median_s, rel=0.03)
    assert stats["mean_s"] == pytest.approx(shape.mean_s, rel=0.05)
    assert stats["mean_gpus"] == pytest.approx(shape.mean_gpus, abs=0.01)
    assert shape.mean_gpus == pytest.approx({"philly": 1.9, "helios": 3.7}[shape.name], abs=0.01)


def test_many_short_and_a_few_very_long_jobs() -> None:
    jobs = generate("philly", seed=0, jobs=2000).jobs
    lengths = sorted(j.duration_s for j in jobs)
    assert sum(d <= 3600 for d in lengths) > len(lengths) / 2
    top = lengths[-len(lengths) // 50 :]  # the longest 2 %
    assert sum(top) > 0.4 * sum(lengths)
    assert max(lengths) <= PHILLY.max_duration_s
    assert {j.gpus for j in jobs} == {1, 2, 4, 8, 16}


def test_same_seed_same_jobs_other_seed_other_jobs() -> None:
    assert generate("helios", seed=1, jobs=50) == generate("helios", seed=1, jobs=50)
    assert generate("helios", seed=1, jobs=50) != generate("helios", seed=2, jobs=50)


def test_bursty_arrivals_keep_the_rate_but_come_in_batches() -> None:
    steady = generate("philly", seed=0, jobs=2000, arrivals="steady").jobs
    bursty = generate("philly", seed=0, jobs=2000, arrivals="bursty").jobs
    for jobs in (steady, bursty):
        assert jobs[-1].submit_s / len(jobs) == pytest.approx(300.0, rel=0.25)
        assert [j.submit_s for j in jobs] == sorted(j.submit_s for j in jobs)

    def close_gaps(jobs: tuple[object, ...]) -> int:
        times = [j.submit_s for j in jobs]  # type: ignore[attr-defined]
        return sum(b - a <= 10 for a, b in itertools.pairwise(times))

    assert close_gaps(bursty) > 3 * close_gaps(steady)


def test_unknown_mix_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        generate("borg")


def test_cli_runs_a_synthetic_workload_without_a_trace_file() -> None:
    result = CliRunner().invoke(
        app,
        [
            *("sim", "--format", "synthetic-helios", "--arrivals", "bursty", "--jobs", "12"),
            *("--seed", "1", "--config", CONFIG, "--json"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["jobs"] == 12 and figures["completed"] == 12


def test_cli_wants_a_trace_for_file_formats_only() -> None:
    missing = CliRunner().invoke(app, ["sim", "--config", CONFIG])
    assert missing.exit_code == 2
    assert missing.stderr.strip() == "--trace: required with --format canonical"
    extra = CliRunner().invoke(
        app, ["sim", "--format", "synthetic-philly", "--trace", "x.csv", "--config", CONFIG]
    )
    assert extra.exit_code == 2 and "not used with --format synthetic-philly" in extra.stderr
