"""Seeded synthetic workloads shaped like the published GPU cluster traces.

Two mixes, each matching its trace's published statistics (docs/reference-systems.md):

- ``philly``: Microsoft Philly (Jeon et al., ATC '19): median job 874 s, mean 18,006 s,
  mean 1.9 GPUs.
- ``helios``: SenseTime Helios (Hu et al., SC '21): median GPU job 206 s, mean 6,652 s,
  mean 3.7 GPUs.

Durations are lognormal, truncated at ``max_duration_s`` (two weeks by default: the traces'
longest jobs ran for weeks, but a simulated run has to end), with the median fixed and the
shape chosen so that the *truncated* mean is the published one. Both traces are "many short
and a few very long jobs": with Philly's figures half the jobs finish within 15 minutes
while the top 2 % hold over half the GPU time. Samples are stratified (one uniform draw in
each of ``jobs`` equal slices of the distribution, shuffled), so the median and the mean of
every generated workload sit close to the published ones whatever the seed; the seed picks
which job gets which duration and when it arrives. GPU counts come from a distribution over
{1, 2, 4, 8, 16} with the published mean, likewise allotted exactly and shuffled; a
16-GPU job is a gang over two 8-GPU instances.

Two arrival patterns:

- ``steady``: a Poisson process with one rate (``mean_interarrival_s``, 5 minutes).
- ``bursty``: the same mean rate, modulated by the day (a sinusoid, three times busier at
  the peak than at night, as both studies report) and submitted in *batches*: a submission
  brings a geometric number of jobs (mean 4, hyperparameter sweeps), its members a few
  seconds apart.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist

from corral.sim.trace import Job, Trace

DAY_S = 86400.0
TWO_WEEKS_S = 14 * DAY_S
# The most jobs one workload may have (``--jobs``). At the mixes' one job every 5 minutes,
# 200,000 jobs arrive over 1.9 years: within the two years a trace row may span
# (trace.MAX_TRACE_S), and more jobs than Philly's whole trace (over 100,000 in 75 days).
# 1,500 jobs replay in seconds, so the bound allows runs of hours; without it a typo
# (1,000,000,000) grew the generator to gigabytes before any job ran.
MAX_JOBS = 200_000


class Arrivals(StrEnum):
    STEADY = "steady"
    BURSTY = "bursty"


@dataclass(frozen=True)
class WorkloadShape:
    """The published statistics a mix reproduces."""

    name: str
    median_s: float
    mean_s: float
    # GPUs per job -> share of jobs (sums to 1).
    gpus: Mapping[int, float]
    max_duration_s: float = TWO_WEEKS_S

    @property
    def mean_gpus(self) -> float:
        return sum(g * p for g, p in self.gpus.items())


# Philly: most jobs are single-GPU; a few percent are 8- and 16-GPU gangs (mean 1.9).
PHILLY = WorkloadShape("philly", 874.0, 18_006.0, {1: 0.72, 2: 0.13, 4: 0.09, 8: 0.05, 16: 0.01})
# Helios: fewer single-GPU jobs, many full-node (8-GPU) and two-node jobs (mean 3.7).
HELIOS = WorkloadShape("helios", 206.0, 6_652.0, {1: 0.55, 2: 0.09, 4: 0.12, 8: 0.17, 16: 0.07})
SHAPES = {s.name: s for s in (PHILLY, HELIOS)}


def _mu_for_median(median: float, sigma: float, cap: float) -> float:
    """The log-location whose lognormal, truncated at ``cap``, has the given median."""
    norm = NormalDist()
    low, high = math.log(median), math.log(median) + sigma
    for _ in range(100):
        mu = (low + high) / 2
        below = norm.cdf((math.log(median) - mu) / sigma)
        if below > 0.5 * norm.cdf((math.log(cap) - mu) / sigma):
            low = mu
        else:
            high = mu
    return (low + high) / 2


def truncated_lognormal_mean(mu: float, sigma: float, cap: float) -> float:
    """Mean of a lognormal(mu, sigma) conditioned on being <= cap."""
    z = (math.log(cap) - mu) / sigma
    norm = NormalDist()
    return math.exp(mu + sigma * sigma / 2) * norm.cdf(z - sigma) / norm.cdf(z)


def parameters(shape: WorkloadShape) -> tuple[float, float]:
    """(mu, sigma) of the lognormal whose truncation at ``max_duration_s`` has the published
    median and mean (bisection on sigma, mu solved for the median at each step)."""

    def mean(sigma: float) -> float:
        mu = _mu_for_median(shape.median_s, sigma, shape.max_duration_s)
        return truncated_lognormal_mean(mu, sigma, shape.max_duration_s)

    low, high = 1e-3, 6.0
    if mean(high) < shape.mean_s:
        raise ValueError(f"{shape.name}: the cap is too low for a mean of {shape.mean_s:g}")
    for _ in range(100):
        mid = (low + high) / 2
        if mean(mid) < shape.mean_s:
            low = mid
        else:
            high = mid
    sigma = (low + high) / 2
    return _mu_for_median(shape.median_s, sigma, shape.max_duration_s), sigma


def durations(shape: WorkloadShape, count: int, rng: random.Random) -> list[float]:
    """``count`` stratified draws of the truncated lognormal, in random order."""
    mu, sigma = parameters(shape)
    norm = NormalDist()
    top = norm.cdf((math.log(shape.max_duration_s) - mu) / sigma)
    found = []
    for i in range(count):
        u = (i + rng.random()) / count * top
        u = min(max(u, 1e-12), top - 1e-12)
        found.append(max(math.exp(mu + sigma * norm.inv_cdf(u)), 1.0))
    rng.shuffle(found)
    return found


def gpu_counts(shape: WorkloadShape, count: int, rng: random.Random) -> list[int]:
    """Exactly the shape's shares of ``count`` jobs (largest remainder), in random order."""
    raw = {g: p * count for g, p in shape.gpus.items()}
    whole = {g: int(v) for g, v in raw.items()}
    short = count - sum(whole.values())
    for g in sorted(raw, key=lambda g: (whole[g] - raw[g], g))[:short]:
        whole[g] += 1
    found = [g for g, n in sorted(whole.items()) for _ in range(n)]
    rng.shuffle(found)
    return found


def arrival_times(
    count: int, mean_interarrival_s: float, arrivals: Arrivals, rng: random.Random
) -> list[float]:
    """Submission times (seconds from the start), sorted."""
    if arrivals is Arrivals.STEADY:
        t, found = 0.0, []
        for _ in range(count):
            t += rng.expovariate(1.0 / mean_interarrival_s)
            found.append(t)
        return found
    # Batches of mean 4 jobs, batch rate a quarter of the job rate, modulated by the day:
    # rate(t) = base * (1 + a * sin(2 pi t / day)) with peak / trough = 3 (a = 0.5), drawn
    # by thinning a Poisson process at the peak rate.
    batch_mean = 4.0
    base = 1.0 / (mean_interarrival_s * batch_mean)
    amplitude = 0.5
    peak = base * (1 + amplitude)
    t, found = 0.0, []
    while len(found) < count:
        t += rng.expovariate(peak)
        rate = base * (1 + amplitude * math.sin(2 * math.pi * t / DAY_S))
        if rng.random() * peak > rate:
            continue
        size = 1 + int(math.log(1.0 - rng.random()) / math.log(1 - 1 / batch_mean))
        offset = 0.0
        for _ in range(min(size, count - len(found))):
            found.append(t + offset)
            offset += rng.uniform(1.0, 10.0)
    found.sort()
    return found


def generate(
    shape: WorkloadShape | str,
    *,
    seed: int = 0,
    jobs: int = 1500,
    arrivals: Arrivals | str = Arrivals.STEADY,
    mean_interarrival_s: float = 300.0,
) -> Trace:
    """A seeded workload of ``jobs`` jobs shaped like ``shape`` ("philly" or "helios")."""
    if isinstance(shape, str):
        if shape not in SHAPES:
            raise ValueError(f"unknown workload {shape!r} (choose from {', '.join(SHAPES)})")
        shape = SHAPES[shape]
    if not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"jobs: must be 1 to {MAX_JOBS:,}, got {jobs:,}")
    mode = Arrivals(arrivals)
    rng = random.Random(f"{seed}:synthetic:{shape.name}:{mode.value}")
    submits = arrival_times(jobs, mean_interarrival_s, mode, rng)
    lengths = durations(shape, jobs, rng)
    gpus = gpu_counts(shape, jobs, rng)
    found = tuple(
        Job(round(s, 3), g, round(d, 3), f"{shape.name}-{i}")
        for i, (s, g, d) in enumerate(zip(submits, gpus, lengths, strict=True))
    )
    return Trace(found)


def describe(trace: Trace) -> Mapping[str, float]:
    """Median and mean duration and mean GPUs of a trace (for checks and the docs)."""
    lengths: Sequence[float] = sorted(j.duration_s for j in trace.jobs)
    n = len(lengths)
    median = (lengths[(n - 1) // 2] + lengths[n // 2]) / 2
    return {
        "jobs": float(n),
        "median_s": median,
        "mean_s": sum(lengths) / n,
        "mean_gpus": sum(j.gpus for j in trace.jobs) / n,
        "span_s": trace.jobs[-1].submit_s - trace.jobs[0].submit_s,
    }
