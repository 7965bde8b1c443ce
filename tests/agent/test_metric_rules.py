"""The trial helper (``corral_trial``, mounted into trial images without Corral) keeps a copy
of the metric rules of ``corral.protocol.metrics``: these tests hold the copy to the original,
so a line the helper writes is always one the agent takes, and a name, kind or batch count
the helper takes is one the protocol takes."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType

import pytest

from agent_runtime.trial_env import HELPER_DIR
from agent_runtime.trial_metrics import parse_line
from corral.protocol import metrics as rules

NAMES = ["loss", "", "a" * 64, "a" * 65, "val loss", "é", "a\nb", "tab\there", "\x00", "🚀"]
KINDS = ["training", "validation", "test", "Training", ""]
BATCHES: list[object] = [0, 1, 10**12, -1, True, 1.5, "3"]
VALUES: list[object] = [0.5, 1, -3, 10**400, float("nan"), float("inf"), -math.inf]


@pytest.fixture
def helper(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """A fresh copy of the helper module, writing to ``tmp_path/m.jsonl`` as rank 0."""
    spec = importlib.util.spec_from_file_location(
        "corral_trial_copy", HELPER_DIR / "corral_trial.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv(module.METRICS_FILE_ENV, str(tmp_path / "m.jsonl"))
    monkeypatch.delenv("RANK", raising=False)
    return module


def _accepted(helper: ModuleType, kind: object, batches: object, **values: object) -> bool:
    try:
        helper.report(kind, batches, **values)
    except (TypeError, ValueError):
        return False
    return True


def test_the_constants_are_the_protocols(helper: ModuleType) -> None:
    assert tuple(helper.KINDS) == rules.KINDS
    assert helper.MAX_NAME == rules.MAX_NAME_LENGTH


@pytest.mark.parametrize("name", NAMES)
def test_the_helper_takes_the_names_the_protocol_takes(helper: ModuleType, name: str) -> None:
    assert _accepted(helper, "training", 1, **{name: 1.0}) == rules.valid_name(name)


@pytest.mark.parametrize("kind", KINDS)
def test_the_helper_takes_the_kinds_the_protocol_takes(helper: ModuleType, kind: str) -> None:
    assert _accepted(helper, kind, 1, loss=1.0) == (rules.metric_kind(kind) is not None)


@pytest.mark.parametrize("batches", BATCHES)
def test_a_batch_count_the_helper_takes_the_protocol_takes(
    helper: ModuleType, batches: object
) -> None:
    # Both refuse the same counts (a bool is no count, though True == 1), and the helper
    # writes what it takes as given.
    protocol = rules.whole_batches(batches)
    assert _accepted(helper, "training", batches, loss=1.0) == (protocol is not None)
    if protocol is not None:
        assert protocol == batches and type(protocol) is type(batches)


def test_every_line_the_helper_writes_is_a_point_the_agent_takes(
    helper: ModuleType, tmp_path: Path
) -> None:
    written = []
    for n, value in enumerate(VALUES):  # a number the protocol leaves out, the helper too
        for name in filter(rules.valid_name, NAMES):
            assert helper.report("validation", n, **{name: value, "other": 2.0})
            written.append((n, name, value))
    lines = (tmp_path / "m.jsonl").read_bytes().splitlines()
    assert len(lines) == len(written) > 0
    for line, (n, name, value) in zip(lines, written, strict=True):
        point = parse_line(line, 0, 0.0)  # raises Malformed if the agent would drop the line
        assert point is not None and (point.kind, point.batches) == ("validation", n)
        kept = rules.finite_value(value)
        assert point.values == ({name: kept} if kept is not None else {}) | {"other": 2.0}
        assert json.loads(line)["values"] == point.values
