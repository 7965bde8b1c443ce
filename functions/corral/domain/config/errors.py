"""Configuration problems, reported with the full path of the field that is wrong.

Every loader raises one :class:`ConfigError` carrying *all* problems it found, each a
``(path, reason)`` pair such as ``resource_pools[0].provider.max_instances: must be >=
min_instances``. The path is spelled the way the user wrote the file (dotted fields, list
indices in brackets), so it can be pasted into an editor search box. Pydantic's ``loc`` tuples
are converted here; nothing else in the code base should format pydantic errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import AfterValidator, ValidationError
from pydantic_core import PydanticCustomError

from corral.domain.text import NOT_UNICODE

# The pydantic error type of our own cross-field rules; its context carries the reason and the
# sub-path ("at") below the model that raised it, because a model validator cannot set `loc`.
CUSTOM_ERROR_TYPE = "corral"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a config. An empty path means the document as a whole."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


class ConfigError(ValueError):
    """A config that cannot be used, with every problem found (never an empty list)."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems) or (Problem("", "invalid config"),)
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def single(cls, path: str, reason: str) -> ConfigError:
        return cls([Problem(path, reason)])


def rule_error(at: str, reason: str) -> PydanticCustomError:
    """An error for a cross-field rule, reported at ``<model path>.<at>``."""
    return PydanticCustomError(CUSTOM_ERROR_TYPE, "{reason}", {"reason": reason, "at": at})


def field_error(reason: str) -> PydanticCustomError:
    """An error for a single field's value, reported at the field itself."""
    return PydanticCustomError(CUSTOM_ERROR_TYPE, "{reason}", {"reason": reason, "at": ""})


def matching(pattern: re.Pattern[str], reason: str, *, echo: bool = True) -> AfterValidator:
    """A string field's check (``Annotated[str, matching(...)]``): ``pattern`` must match, or
    the field error ``reason`` (followed by ``, got '<value>'`` unless ``echo`` is off)."""

    def check(value: str) -> str:
        if not pattern.match(value):
            raise field_error(f"{reason}, got {value!r}" if echo else reason)
        return value

    return AfterValidator(check)


def join_path(*parts: str | int) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part:
            out += f".{part}" if out and not part.startswith("[") else part
    return out


def _user_path(loc: Sequence[str | int], data: object) -> list[str | int]:
    """Convert pydantic's ``loc`` into the path the user wrote, walking the input alongside.

    Two segments pydantic adds do not exist in the file and are dropped:
    - the tag of a discriminated union (``provider.aws.region``): it equals the ``type`` value
      of the mapping at that level, and is dropped at most once per level;
    - index ``0`` of a field we normalise from "one item or a list" when the user wrote one
      item (``zone: us-central1-a`` errors at ``zone``, not ``zone[0]``).
    """
    out: list[str | int] = []
    cur: object = data
    tag_dropped = False
    for seg in loc:
        if isinstance(seg, int) and not isinstance(cur, list | tuple):
            continue
        if (
            isinstance(seg, str)
            and isinstance(cur, Mapping)
            and not tag_dropped
            and cur.get("type") == seg
        ):
            tag_dropped = True
            continue
        out.append(seg)
        tag_dropped = False
        if isinstance(cur, Mapping):
            cur = cur.get(seg)
        elif isinstance(cur, list | tuple) and isinstance(seg, int) and 0 <= seg < len(cur):
            cur = cur[seg]
        else:
            cur = None
    return out


# Pydantic's number bounds: error type -> (its context key, the comparison we print).
_BOUNDS = {
    "greater_than_equal": ("ge", ">="),
    "greater_than": ("gt", ">"),
    "less_than_equal": ("le", "<="),
    "less_than": ("lt", "<"),
}


def _reason(err: Mapping[str, Any]) -> tuple[str, str]:
    """(extra sub-path, reason) for one pydantic error, in our wording."""
    kind = str(err["type"])
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    msg = str(err["msg"])
    simple = {
        "missing": "required",
        "extra_forbidden": "unknown field",
        "int_parsing": "must be an integer",
        "int_type": "must be an integer",
        "int_from_float": "must be a whole number",
        "float_parsing": "must be a number",
        "float_type": "must be a number",
        "decimal_parsing": "must be a number",
        "decimal_type": "must be a number",
        "bool_parsing": "must be true or false",
        "bool_type": "must be true or false",
        "string_type": "must be a string",
        "dict_type": "must be a mapping",
        "model_type": "must be a mapping",
        "model_attributes_type": "must be a mapping",
        "list_type": "must be a list",
        "tuple_type": "must be a list",
        "finite_number": "must be a finite number",
        # A lone surrogate in a key or a constrained string; the text rule names it
        # (``loader.validate``), this is its fallback.
        "string_unicode": NOT_UNICODE,
    }
    if kind == CUSTOM_ERROR_TYPE:
        return str(ctx.get("at", "")), str(ctx.get("reason", msg))
    if kind in simple:
        return "", simple[kind]
    if kind in _BOUNDS:
        key, op = _BOUNDS[kind]
        return "", f"must be {op} {ctx[key]}"
    if kind == "too_short":
        n = ctx.get("min_length", 1)
        return "", "must not be empty" if n == 1 else f"must have at least {n} items"
    if kind == "too_long":
        return "", f"must have at most {ctx.get('max_length')} items"
    if kind == "string_too_short":
        return "", "must not be empty"
    if kind == "string_too_long":
        return "", f"must be at most {ctx.get('max_length')} characters"
    if kind == "literal_error":
        return "", f"must be {ctx.get('expected')}"
    if kind == "union_tag_invalid":
        return "type", f"must be one of {ctx.get('expected_tags')} (got {ctx.get('tag')!r})"
    if kind == "union_tag_not_found":
        return "type", "required"
    if kind == "value_error":
        return "", msg.removeprefix("Value error, ")
    return "", msg


def problems_from_validation_error(exc: ValidationError, data: object) -> list[Problem]:
    """Our problems for a pydantic error raised while validating ``data``."""
    problems: list[Problem] = []
    errors = exc.errors()
    for err in errors:
        loc = tuple(err["loc"])
        # Pydantic also says a list is "too short" when its items failed; the item errors say
        # what is wrong, so the length complaint is noise then.
        if err["type"] == "too_short" and any(
            len(other["loc"]) > len(loc) and tuple(other["loc"][: len(loc)]) == loc
            for other in errors
        ):
            continue
        at, reason = _reason(err)
        path = join_path(*_user_path(err["loc"], data))
        if at:
            path = f"{path}{at}" if at.startswith("[") or not path else f"{path}.{at}"
        problem = Problem(path, reason)
        if problem not in problems:
            problems.append(problem)
    return problems
