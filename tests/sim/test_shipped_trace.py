"""The Alibaba trace ships with the repository, with its attribution, and every command in
the docs and benchmarks reads it from there (nothing points outside a fresh clone)."""

from __future__ import annotations

import re
from pathlib import Path

from corral.sim.trace import TraceFormat, read_trace

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "traces/alibaba-gpu-2023/openb_pod_list_default.csv"


def test_the_trace_is_in_the_repository_with_its_attribution() -> None:
    trace = read_trace(TRACE, TraceFormat.ALIBABA_OPENB)
    assert len(trace.jobs) == 6203
    assert dict(trace.skipped) and sum(trace.skipped.values()) == 8152 - 6203
    readme = (TRACE.parent / "README.md").read_text()
    for needed in ("Alibaba Group", "CC BY 4.0", "7a6c496e4f4b6ce6150be8f881cb051bf2abff42"):
        assert needed in readme


def test_no_doc_example_or_benchmark_points_outside_the_repository() -> None:
    outside = re.compile(r"\.\./shared|shared/traces")
    files = [
        *REPO.glob("docs/*.md"),
        *REPO.glob("benchmarks/*.py"),
        *REPO.glob("examples/*"),
        REPO / "README.md",
    ]
    offenders = [str(f.relative_to(REPO)) for f in files if outside.search(f.read_text())]
    assert offenders == []
