"""The metric that ranks an experiment's trials, read from its stored config by the config's
own model (``SearcherConfig``), never by hand; a config that no longer validates ranks
nothing rather than failing the heartbeat or the view that asks."""

from __future__ import annotations

from typing import Any

import pytest

from corral.domain.config import SearcherConfig
from corral.services.trial_metrics import SearcherMetric, searcher_metric


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, (None, True)),
        ({"searcher": None}, (None, True)),
        (
            {"searcher": {"name": "grid", "metric": "acc", "smaller_is_better": False}},
            ("acc", False),
        ),
        ({"searcher": {"metric": "validation_loss"}}, ("validation_loss", True)),
        ({"searcher": {"metric": ""}}, (None, True)),
        ({"searcher": "grid"}, (None, True)),
        ({"searcher": {"metric": "loss", "smaller_is_better": "sometimes"}}, (None, True)),
    ],
)
def test_the_searcher_metric_of_a_stored_config(
    config: dict[str, Any], expected: tuple[str | None, bool]
) -> None:
    ranked = searcher_metric(config)
    assert isinstance(ranked, SearcherMetric) and ranked == expected


def test_a_searcher_config_gives_its_metric() -> None:
    ranked = SearcherMetric.of(SearcherConfig(metric="acc", smaller_is_better=False))
    assert (ranked.metric, ranked.smaller_is_better) == ("acc", False)
    assert SearcherMetric.of(SearcherConfig()) == SearcherMetric(None, True)
