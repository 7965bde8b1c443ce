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
import sys
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from corral.domain.config.common import FrozenModel, RuleProblems, rule
from corral.domain.config.errors import ConfigError, field_error, rule_error

# The most trials one search may make (a grid's product, a random search's max_trials): an
# experiment record lists its trials, and a store item has a size limit (DynamoDB: 400 KB).
MAX_TRIALS = 10_000
MAX_GRID_TRIALS = MAX_TRIALS  # the name before random searches were capped too

# A value a trial receives is JSON, and JSON has no NaN or Infinity: Python writes them as
# `NaN` (which strict parsers refuse) and pydantic as `null`, so a trial would silently get
# `null`. Every number of a search space is therefore finite, and so is every value a searcher
# can make from it (see LogHP and DoubleHP).
FINITE = "must be a finite number"
_FLOAT_LIMIT = "a float holds up to about 1.8e308"


def _non_finite(value: object, at: str = "") -> Iterator[str]:
    """The sub-paths (``""``: the value itself, ``x[2]``) of the NaN or infinite floats in a
    constant, nested lists and mappings included."""
    if isinstance(value, float) and not math.isfinite(value):
        yield at
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _non_finite(item, f"{at}.{key}" if at else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _non_finite(item, f"{at}[{i}]")


def _float_in_range(value: object) -> object:
    """An integer beyond any float is out of range, not "not a number" (pydantic's words)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
        raise field_error(f"is out of range ({_FLOAT_LIMIT})")
    return value


# A bound of a real range: NaN and infinities are refused as other numeric fields refuse them.
FiniteFloat = Annotated[float, BeforeValidator(_float_in_range), Field(allow_inf_nan=False)]


class ConstHP(FrozenModel):
    type: Literal["const"]
    """A constant."""
    val: Any
    """The value, given to every trial; numbers in it must be finite."""

    @rule
    def _check_finite(self) -> RuleProblems:
        for at in _non_finite(self.val):
            yield rule_error(_join_at("val", at), FINITE)


class CategoricalHP(FrozenModel):
    type: Literal["categorical"]
    """One of a list of values."""
    vals: tuple[Any, ...] = Field(min_length=1)
    """The values; `single` takes the first, `grid` each, `random` one at random. Numbers in them
    must be finite."""

    @rule
    def _check_finite(self) -> RuleProblems:
        for i, val in enumerate(self.vals):
            for at in _non_finite(val):
                yield rule_error(_join_at(f"vals[{i}]", at), FINITE)


class _RangeHP(FrozenModel):
    minval: FiniteFloat
    """Lowest value (for `log`: the lowest exponent), a finite number; must be <= `maxval`."""
    maxval: FiniteFloat
    """Highest value (for `log`: the highest exponent), a finite number."""
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

    @rule
    def _check_width(self) -> RuleProblems:
        # Grid steps and random samples are computed from maxval - minval; past the largest
        # float it is infinite and the values become inf or NaN.
        if not math.isfinite(self.maxval - self.minval):
            yield rule_error("maxval", f"maxval - minval is out of range ({_FLOAT_LIMIT})")


class LogHP(_RangeHP):
    """``base ** x`` for x between ``minval`` and ``maxval`` (the exponents)."""

    type: Literal["log"]
    """`base ** x` for an exponent `x` between `minval` and `maxval`."""
    base: FiniteFloat = Field(default=10.0, gt=0)
    """Base of the exponent; not 1. `base` to the power `minval` and to the power `maxval` must
    each fit a float (about 1.8e308)."""

    @rule
    def _check_base(self) -> RuleProblems:
        if self.base == 1:
            yield rule_error("base", "must not be 1")

    @rule
    def _check_power(self) -> RuleProblems:
        # base ** x is monotonic in x, so when both ends fit a float every value between them
        # does too: the midpoint, each grid point and each sample (clamped to the range).
        for field, exponent in (("minval", self.minval), ("maxval", self.maxval)):
            if _power(self.base, exponent) is None:
                shown = f"{_number(self.base)}**{_number(exponent)}"
                yield rule_error(field, f"{shown} is out of range ({_FLOAT_LIMIT})")


def _power(base: float, exponent: float) -> float | None:
    """``base ** exponent``, or None when it does not fit a float."""
    try:
        value = base**exponent
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _number(x: float) -> str:
    """A bound as the user likely wrote it: ``2000`` rather than ``2000.0``."""
    return str(int(x)) if x.is_integer() and abs(x) < 1e16 else repr(x)


def _join_at(field: str, at: str) -> str:
    """``field`` followed by a sub-path from :func:`_non_finite` (``x`` or ``[2]``)."""
    if not at:
        return field
    return f"{field}{at}" if at.startswith("[") else f"{field}.{at}"


def _constant_unless_typed(value: object) -> object:
    if isinstance(value, Mapping) and "type" in value:
        return value
    # Checked here, where the path is still the one the user wrote (`lr`, `opt.beta`): once
    # wrapped, ConstHP would name `lr.val`, a key that is not in the file.
    for at in _non_finite(value):
        raise rule_error(at, FINITE)
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
    if isinstance(hp, IntHP):
        # Exact arithmetic: integers need not fit a float (10**400 is a valid bound), and
        # round() of a Fraction rounds half to even as round() of a float does.
        ints = (
            round(hp.minval + Fraction((hp.maxval - hp.minval) * i, hp.count - 1))
            for i in range(hp.count)
        )
        return list(dict.fromkeys(ints))  # dedupe, keep order
    steps = [_step(hp, i, hp.count) for i in range(hp.count)]
    if isinstance(hp, LogHP):
        return [hp.base**x for x in steps]
    return steps


def _step(hp: _RangeHP, i: int, count: int) -> float:
    """Grid point ``i`` of ``count`` (at least 2) of a real range."""
    x = hp.minval + (hp.maxval - hp.minval) * i / (count - 1)
    if not math.isfinite(x):
        # (maxval - minval) * i alone can pass the largest float; only then this order, so
        # that ordinary grids stay bit-for-bit the same.
        x = hp.minval + (hp.maxval - hp.minval) * (i / (count - 1))
    return _within(hp, x)


def _within(hp: _RangeHP, x: float) -> float:
    """``x`` clamped to the range: float rounding can put a step or a sample a hair past
    ``maxval``, and for ``log`` that hair could cross the largest float."""
    return min(max(x, hp.minval), hp.maxval)


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
        return hp.base ** _midpoint(hp)
    return _midpoint(hp)


def _midpoint(hp: _RangeHP) -> float:
    middle = (hp.minval + hp.maxval) / 2
    # minval + maxval can pass the largest float when (maxval - minval) does not: 1e308 and
    # 1.5e308. Only then the other form, so that ordinary midpoints stay bit-for-bit the same.
    return middle if math.isfinite(middle) else hp.minval + (hp.maxval - hp.minval) / 2


def _sample(hp: Hyperparameter, rng: random.Random) -> Any:
    if isinstance(hp, ConstHP):
        return hp.val
    if isinstance(hp, CategoricalHP):
        return rng.choice(hp.vals)
    if isinstance(hp, IntHP):
        return rng.randint(hp.minval, hp.maxval)
    if isinstance(hp, LogHP):
        return hp.base ** _within(hp, rng.uniform(hp.minval, hp.maxval))
    return _within(hp, rng.uniform(hp.minval, hp.maxval))


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
