"""``benchmarks/cold_start.py --breakdown``: where a handler's start goes, from
``python -X importtime`` (the figures docs/benchmarks.md quotes for the 1.5 x bar)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "cold_start_breakdown", REPO / "benchmarks" / "cold_start_breakdown.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


parts = _load()

IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       300 |        300 |   encodings.aliases
import time:      2000 |       2500 | site
import time:      1000 |       1000 |     botocore.compat
import time:      4000 |       5000 |   boto3
import time:       500 |        500 |   yamlish
import time:      3000 |       3000 |       corral.domain.config.aws
import time:      2000 |       5000 |     corral.domain.trial
import time:      1000 |       1000 |   corral.api.views
"""


@pytest.mark.parametrize(
    ("module", "family"),
    [
        ("boto3", "AWS SDK"),
        ("botocore.client", "AWS SDK"),
        ("pydantic_core._pydantic_core", "pydantic"),
        ("yaml.reader", "PyYAML"),
        ("yamlish", parts.OTHER),  # a prefix counts only as a whole dotted segment
        ("corral.domain.config.aws", "Corral config models"),
        ("corral.api.views", "Corral API"),
        ("corral.domain.trial", "Corral, the rest"),
        ("json", parts.OTHER),
    ],
)
def test_a_module_belongs_to_the_first_family_with_its_prefix(module: str, family: str) -> None:
    assert parts.family(module) == family


def test_only_the_probe_imports_count_not_the_interpreter_start() -> None:
    seconds = parts.import_seconds(parts.probe_imports(IMPORTTIME))

    assert seconds == pytest.approx(
        {
            "AWS SDK": 0.005,
            parts.OTHER: 0.0005,
            "Corral config models": 0.003,
            "Corral, the rest": 0.002,
            "Corral API": 0.001,
        }
    )


def test_what_is_not_imports_is_the_handler_work() -> None:
    found = parts.breakdown(0.02, parts.probe_imports(IMPORTTIME), {"corral.domain.trial": 3})

    assert sum(found.seconds.values()) == pytest.approx(0.02)
    assert found.seconds[parts.REST] == pytest.approx(0.02 - 0.0115)
    assert found.seconds["pydantic"] == 0.0
    assert found.dataclasses == {"Corral, the rest": 3}


def test_imports_never_exceed_the_start_they_are_part_of() -> None:
    found = parts.breakdown(0.0023, parts.probe_imports(IMPORTTIME), {})

    assert sum(found.seconds.values()) == pytest.approx(0.0023)
    assert found.seconds[parts.REST] == 0.0


def test_the_table_is_in_units_of_the_baseline() -> None:
    baseline = parts.Breakdown(0.5, dict.fromkeys(parts.ORDER, 0.0) | {parts.REST: 0.5}, {})
    handler = parts.breakdown(1.0, parts.probe_imports(IMPORTTIME), {"corral.domain.trial": 2})

    lines = parts.table([("baseline", baseline), ("corral.handlers.aws.x", handler)]).splitlines()

    assert lines[0].split()[-2:] == ["baseline", "x"]
    total = next(line for line in lines if line.startswith("total"))
    assert total.split()[-2:] == ["1.00", "2.00"]
    corral = next(line for line in lines if line.startswith("dataclasses: Corral"))
    assert corral.split()[-2:] == ["0", "2"]


def test_a_real_probe_in_a_fresh_interpreter() -> None:
    probe = (
        "import json, sys, time\nstart = time.perf_counter()\n"
        "import corral.domain.trial\n"
        'print("CORRAL-BENCH", time.perf_counter() - start, 0)\n'
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "functions")}

    found = parts.run([probe], env, sys.executable)

    assert found.total_s > 0
    assert found.seconds["Corral, the rest"] > 0
    assert found.seconds["AWS SDK"] == 0.0  # the interpreter's own start is left out
    assert found.dataclasses.get("Corral, the rest", 0) >= 1
