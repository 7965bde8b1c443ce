"""Hyperparameters and searchers, and the expansion of a search into trials.

Spelled like Determined: a plain value is a constant; a mapping with ``type`` is one of
``const`` (``val``), ``categorical`` (``vals``), ``int`` / ``double`` (``minval``, ``maxval``,
optional ``count`` for grid search) and ``log`` (``base`` ** exponent, with ``minval`` and
``maxval`` the exponents). A mapping without ``type`` is a constant whose value is that mapping.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from corral.domain.config.common import FrozenModel, RuleProblems, rule
from corral.domain.config.errors import ConfigError, rule_error

# The most trials one search may make (a grid's product, a random search's max_trials): an
# experiment record lists its trials, and a store item has a size limit (DynamoDB: 400 KB).
MAX_TRIALS = 10_000
MAX_GRID_TRIALS = MAX_TRIALS  # the name before random searches were capped too


class ConstHP(FrozenModel):
    type: Literal["const"]
    """A constant."""
    val: Any
    """The value, given to every trial."""


class CategoricalHP(FrozenModel):
    type: Literal["categorical"]
    """One of a list of values."""
    vals: tuple[Any, ...] = Field(min_length=1)
    """The values; `single` takes the first, `grid` each, `random` one at random."""


class _RangeHP(FrozenModel):
    minval: float
    """Lowest value (for `log`: the lowest exponent); must be <= `maxval`."""
    maxval: float
    """Highest value (for `log`: the highest exponent)."""
    count: int | None = Field(default=None, ge=1)  # grid points; only the grid searcher uses it
    """Points of a grid search, evenly spaced and inclusive (integers rounded and de-duplicated);
    required by `grid`, at most 10,000."""

    @rule
    def _check_range(self) -> RuleProblems:
        if self.minval > self.maxval:
            yield rule_error("minval", "must be <= maxval")
        # Checked here, before any grid is built: a count of millions would cost seconds.
        if self.count is not None and self.count > MAX_TRIALS:
            yield rule_error("count", f"must be <= {MAX_TRIALS:,} (the most trials of a search)")


class IntHP(_RangeHP):
    type: Literal["int"]
    """An integer range."""
    minval: int
    maxval: int


class DoubleHP(_RangeHP):
    type: Literal["double"]
    """A real range."""


class LogHP(_RangeHP):
    """``base ** x`` for x between ``minval`` and ``maxval`` (the exponents)."""

    type: Literal["log"]
    """`base ** x` for an exponent `x` between `minval` and `maxval`."""
    base: float = Field(default=10.0, gt=0)
    """Base of the exponent; not 1."""

    @rule
    def _check_base(self) -> RuleProblems:
        if self.base == 1:
            yield rule_error("base", "must not be 1")


def _constant_unless_typed(value: object) -> object:
    if isinstance(value, Mapping) and "type" in value:
        return value
    return {"type": "const", "val": value}


# The before-validator must wrap the tagged union (outer Annotated), or the tag is looked up
# before a plain constant has been turned into `{type: const, val: ...}`.
Hyperparameter = Annotated[
    Annotated[ConstHP | CategoricalHP | IntHP | DoubleHP | LogHP, Field(discriminator="type")],
    BeforeValidator(_constant_unless_typed),
]


class SearcherConfig(FrozenModel):
    name: Literal["single", "grid", "random"] = "single"
    """`single`: one trial (constants, first categorical values, range midpoints); `grid`: the
    cartesian product (at most 10,000 trials); `random`: `max_trials` samples."""
    max_trials: int | None = Field(default=None, ge=1)
    """Number of trials of a `random` search (required there), at most 10,000."""
    metric: str | None = None
    """Validation metric that names the best trial."""
    smaller_is_better: bool = True
    """Whether a smaller `metric` is better."""
    seed: int | None = None  # unset: derived from the config, so expansion is repeatable
    """Seed of the random searcher; unset: derived from the search space, so an expansion is
    repeatable."""

    @rule
    def _check_searcher(self) -> RuleProblems:
        if self.name == "random" and self.max_trials is None:
            yield rule_error("max_trials", "required for the random searcher")
        if self.max_trials is not None and self.max_trials > MAX_TRIALS:
            yield rule_error(
                "max_trials", f"must be <= {MAX_TRIALS:,} (the most trials of a search)"
            )


def grid_points(hp: Hyperparameter) -> list[Any] | None:
    """The values a grid search takes for one hyperparameter; None if a range has no count."""
    if isinstance(hp, ConstHP):
        return [hp.val]
    if isinstance(hp, CategoricalHP):
        return list(hp.vals)
    if hp.count is None:
        return None
    if hp.count == 1:
        return [single_value(hp)]
    steps = [hp.minval + (hp.maxval - hp.minval) * i / (hp.count - 1) for i in range(hp.count)]
    if isinstance(hp, IntHP):
        return list(dict.fromkeys(round(x) for x in steps))  # dedupe, keep order
    if isinstance(hp, LogHP):
        return [hp.base**x for x in steps]
    return steps


def grid_size(hps: Mapping[str, Hyperparameter]) -> int:
    return math.prod(len(grid_points(hp) or [None]) for hp in hps.values())


def single_value(hp: Hyperparameter) -> Any:
    """The one value the single searcher uses: the constant, first choice or range midpoint."""
    if isinstance(hp, ConstHP):
        return hp.val
    if isinstance(hp, CategoricalHP):
        return hp.vals[0]
    if isinstance(hp, IntHP):
        return (hp.minval + hp.maxval) // 2
    if isinstance(hp, LogHP):
        return hp.base ** ((hp.minval + hp.maxval) / 2)
    return (hp.minval + hp.maxval) / 2


def _sample(hp: Hyperparameter, rng: random.Random) -> Any:
    if isinstance(hp, ConstHP):
        return hp.val
    if isinstance(hp, CategoricalHP):
        return rng.choice(hp.vals)
    if isinstance(hp, IntHP):
        return rng.randint(hp.minval, hp.maxval)
    if isinstance(hp, LogHP):
        return hp.base ** rng.uniform(hp.minval, hp.maxval)
    return rng.uniform(hp.minval, hp.maxval)


def _derived_seed(hps: Mapping[str, Hyperparameter]) -> int:
    """A seed from the search space itself: pure and repeatable, unlike the clock."""
    text = json.dumps({k: v.model_dump(mode="json") for k, v in hps.items()}, sort_keys=True)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def expand(searcher: SearcherConfig, hps: Mapping[str, Hyperparameter]) -> list[dict[str, Any]]:
    """Each trial's hyperparameters, in a stable order (keys in config order)."""
    if searcher.name == "single":
        return [{k: single_value(hp) for k, hp in hps.items()}]
    if searcher.name == "grid":
        axes: list[list[Any]] = []
        for name, hp in hps.items():
            points = grid_points(hp)
            if points is None:
                raise ConfigError.single(
                    f"hyperparameters.{name}.count", "required for the grid searcher"
                )
            axes.append(points)
        if math.prod(len(a) for a in axes) > MAX_TRIALS:
            raise ConfigError.single("searcher", f"grid exceeds {MAX_TRIALS:,} trials")
        return [dict(zip(hps, combo, strict=True)) for combo in itertools.product(*axes)]
    seed = searcher.seed if searcher.seed is not None else _derived_seed(hps)
    rng = random.Random(seed)
    assert searcher.max_trials is not None  # enforced by SearcherConfig
    return [{k: _sample(hp, rng) for k, hp in hps.items()} for _ in range(searcher.max_trials)]
