"""Cold start: how long each Lambda handler module takes to import, next to a bare
``import boto3`` measured in the same run (ratios, because these machines are noisy).

Each measurement is a fresh interpreter (a cold start imports everything once), repeated;
the median is reported. Run: ``python benchmarks/cold_start.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

MODULES = [
    "boto3",  # the baseline every Python Lambda that talks to AWS pays
    "corral.handlers.aws.api",
    "corral.handlers.aws.schedule",
    "corral.handlers.aws.scale_up",
    "corral.handlers.aws.idle_reap",
    "corral.handlers.aws.spot_reconcile",
]

PROBE = """
import sys, time
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
print(elapsed, int('boto3' in sys.modules))
"""


def measure(module: str, runs: int) -> tuple[float, bool]:
    times: list[float] = []
    loads_boto3 = False
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(module=module)],
            check=True,
            capture_output=True,
            text=True,
            env={
                "AWS_DEFAULT_REGION": "us-east-1",
                "POWERTOOLS_SERVICE_NAME": "corral",
                "POWERTOOLS_METRICS_NAMESPACE": "Corral",
                "PATH": "/usr/bin:/bin",
            },
        ).stdout.split()
        times.append(float(out[0]))
        loads_boto3 = out[1] == "1"
    return statistics.median(times), loads_boto3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    results = {m: measure(m, args.runs) for m in MODULES}
    baseline = results["boto3"][0]
    print(f"cold-start import time, median of {args.runs} fresh interpreters")
    print(f"{'module':40} {'seconds':>8} {'x boto3':>8}  imports boto3")
    for module, (seconds, loads_boto3) in results.items():
        boto3_too = "yes" if loads_boto3 else "no"
        print(f"{module:40} {seconds:8.3f} {seconds / baseline:8.2f}  {boto3_too}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
