"""What a cold start imports: each module below costs every cold start of the functions that
import it, for code their first event never runs (docs/benchmarks.md, "Handler cold start").
A fresh interpreter per case, since this test process has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# Powertools' batch utility (asyncio and its parser models), its event data classes (the
# package imports every event source's), the experiment models, and Powertools' OpenAPI
# models (needed only to build /openapi.json).
NOT_ON_THE_COLD_PATH = (
    "aws_lambda_powertools.utilities.batch",
    "aws_lambda_powertools.utilities.data_classes",
    "asyncio",
    "corral.domain.config.experiment",
    "corral.domain.config.hyperparameters",
    "aws_lambda_powertools.event_handler.openapi.models",
)
# The API serves experiments, so it needs their models; Powertools' resolver imports asyncio
# and its HTTP event's data class.
API_NEEDS = (
    "corral.domain.config.experiment",
    "corral.domain.config.hyperparameters",
    "asyncio",
    "aws_lambda_powertools.utilities.data_classes",
)


def _imported(module: str) -> tuple[set[str], list[int]]:
    code = (
        "import gc, importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps([sorted(sys.modules), list(gc.get_threshold())]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    modules, thresholds = json.loads(out.stdout)
    return set(modules), thresholds


@pytest.mark.parametrize("name", ["api", "schedule", "scale_up", "idle_reap", "spot_reconcile"])
def test_a_handler_imports_only_what_its_events_use(name: str) -> None:
    modules, thresholds = _imported(f"corral.handlers.aws.{name}")

    unexpected = [
        m for m in NOT_ON_THE_COLD_PATH if m in modules and not (name == "api" and m in API_NEEDS)
    ]
    assert unexpected == []
    assert "boto3" not in modules  # imported by the first event that needs a client
    assert tuple(thresholds) == (100_000, 50, 1_000)  # collection deferred until that event


def test_lazy_config_names_still_import() -> None:
    import corral.domain.config as config
    from corral.domain.config import MAX_TRIALS, ExperimentConfig
    from corral.domain.config.experiment import ExperimentConfig as Direct
    from corral.domain.config.hyperparameters import MAX_TRIALS as DIRECT_MAX

    assert ExperimentConfig is Direct
    assert MAX_TRIALS == DIRECT_MAX
    assert set(config.__all__) <= set(dir(config)) | set(config._LAZY)
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = config.no_such_name


def test_composing_a_function_builds_no_event_models() -> None:
    """Every function composes the EC2 provider; only ``spot_reconcile`` parses EventBridge
    events, so the provider must not import the parser (its pydantic models are built at
    import: up to 0.03 s of every other function's start)."""
    code = (
        "import json, sys\n"
        "from corral.handlers.aws.composition import context_from_env\n"
        f"config = open({str(REPO / 'examples' / 'cluster.yaml')!r}).read()\n"
        "context = context_from_env({'CORRAL_CLUSTER_CONFIG': config})\n"
        "context.cloud.list_owned  # the provider is built, its clients are not\n"
        "print(json.dumps('corral.adapters.aws.events' in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )

    assert json.loads(out.stdout) is False
