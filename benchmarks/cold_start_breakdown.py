"""Where a handler's cold start goes: ``cold_start.py --breakdown``.

The timed rounds say how long a start takes; this says what it is made of, for deciding
what to cut. One more fresh interpreter per handler, run with ``python -X importtime``:
each module's own import time (``self``, without the modules it imports) is summed by the
family it belongs to, and what is left of the start is the handler's own work (composition,
clients, the calls of its first event). The probe also counts the dataclasses defined by
the modules the start loaded: creating one costs CPython 3.11 about half a millisecond
(``dataclasses`` compiles its methods with ``exec``), so a start that loads a hundred pays
for it.

``-X importtime`` itself slows every import a little, so every figure is in units of the
baseline's start measured the same way (``import boto3`` and one call, also under
``-X importtime``): a handler's column sums to its ratio in that run, and a family's line is
what it adds to the ratio, the thing the 1.5 x bar is about.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

# Families, first match wins: a module belongs to the first whose prefix it has.
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("AWS SDK", ("boto3", "botocore", "urllib3", "s3transfer", "dateutil", "jmespath", "six")),
    ("Powertools", ("aws_lambda_powertools",)),
    ("pydantic", ("pydantic", "pydantic_core", "annotated_types", "typing_inspection")),
    ("PyYAML", ("yaml", "_yaml")),
    ("Corral config models", ("corral.domain.config",)),
    ("Corral API", ("corral.api", "corral.protocol.agent")),
    ("Corral, the rest", ("corral",)),
)
OTHER = "standard library, other"
REST = "not imports: composition, clients, calls"
ORDER = (*(name for name, _ in FAMILIES), OTHER, REST)

# Appended to cold_start.HANDLER_PROBE: the dataclasses each loaded module defines.
DATACLASS_COUNT = """
import collections, inspect, json
_count = collections.Counter()
for _name, _module in list(sys.modules.items()):
    for _value in list(vars(_module).values()) if _module is not None else ():
        if (inspect.isclass(_value) and "__dataclass_fields__" in vars(_value)
                and _value.__module__ == _name):
            _count[_name] += 1
print("CORRAL-DATACLASSES", json.dumps(_count))
"""


def family(module: str) -> str:
    for name, prefixes in FAMILIES:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return name
    return OTHER


def import_seconds(stderr: str) -> dict[str, float]:
    """Each family's own import time from ``-X importtime`` output, in seconds."""
    seconds: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3 or not fields[0].strip().isdigit():
            continue  # the header line
        name = family(fields[2].strip())
        seconds[name] = seconds.get(name, 0.0) + int(fields[0]) / 1e6
    return seconds


@dataclass(frozen=True)
class Breakdown:
    total_s: float  # the importtime run's start, from the probe's own clock
    seconds: dict[str, float]  # of total_s, by family and REST; sums to total_s
    dataclasses: dict[str, int]  # defined by the loaded modules, by family


def breakdown(total_s: float, stderr: str, dataclass_counts: dict[str, int]) -> Breakdown:
    """``stderr`` holds the importtime lines of the probe's own imports (``probe_imports``)."""
    imports = import_seconds(stderr)
    # The probe imports json, sys and time before its clock starts; they are a millisecond,
    # but never let the imports exceed the total they are part of.
    counted = min(sum(imports.values()), total_s)
    scale = counted / sum(imports.values()) if imports else 0.0
    seconds = {name: imports.get(name, 0.0) * scale for name in ORDER[:-1]}
    seconds[REST] = max(total_s - counted, 0.0)
    classes: Counter[str] = Counter()
    for module, count in dataclass_counts.items():
        classes[family(module)] += count
    return Breakdown(total_s, seconds, dict(classes))


def median(runs: list[Breakdown]) -> Breakdown:
    """Each figure's median over runs (a single run moves by a tenth of the baseline)."""
    return Breakdown(
        statistics.median(b.total_s for b in runs),
        {label: statistics.median(b.seconds[label] for b in runs) for label in ORDER},
        runs[0].dataclasses,  # the same modules load every time
    )


def run(args: list[str], env: dict[str, str], python: str) -> Breakdown:
    """One probe (``cold_start``'s argument list) in a fresh ``python -X importtime``."""
    probe, *rest = args
    out = subprocess.run(
        [python, "-X", "importtime", "-c", probe + DATACLASS_COUNT, *rest],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = {line.split(" ", 1)[0]: line for line in out.stdout.splitlines()}
    if out.returncode != 0 or "CORRAL-BENCH" not in lines:
        raise RuntimeError(f"{rest[0] if rest else probe}: {out.stderr[-2000:]}")
    total = float(lines["CORRAL-BENCH"].split()[1])
    counts = json.loads(lines["CORRAL-DATACLASSES"].split(" ", 1)[1])
    return breakdown(total, probe_imports(out.stderr), counts)


def probe_imports(stderr: str) -> str:
    """The importtime lines of what the probe imported, without the interpreter's own start
    (everything up to and including ``site``, which the probe's clock does not see)."""
    lines = stderr.splitlines()
    last_site = max(
        (i for i, line in enumerate(lines) if line.rstrip().endswith("| site")), default=-1
    )
    return "\n".join(lines[last_site + 1 :])


def table(rows: Iterable[tuple[str, Breakdown]]) -> str:
    """One column per probe; the first row must be the baseline, the unit of every figure.
    A column's figures are medians taken one by one, so they need not sum to its total."""
    rows = list(rows)
    unit = rows[0][1].total_s
    names = [name.rsplit(".", 1)[-1] for name, _ in rows]
    width = max(len(label) for label in ORDER) + 2
    out = [f"{'x baseline':{width}}" + "".join(f"{n:>15}" for n in names)]
    for label in ORDER:
        out.append(
            f"{label:{width}}" + "".join(f"{b.seconds[label] / unit:>15.2f}" for _, b in rows)
        )
    out.append(f"{'total':{width}}" + "".join(f"{b.total_s / unit:>15.2f}" for _, b in rows))
    for label, corral in (("dataclasses: Corral's", True), ("dataclasses: others'", False)):
        counts = [
            sum(v for k, v in b.dataclasses.items() if k.startswith("Corral") == corral)
            for _, b in rows
        ]
        out.append(f"{label:{width}}" + "".join(f"{c:>15}" for c in counts))
    return "\n".join(out)
