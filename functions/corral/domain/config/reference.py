"""The configuration reference in docs/configuration.md, generated from the config models.

Every field of every config model gets one table row: its dotted path as written in a file,
its type, default, the constraints pydantic enforces on it, and its meaning. The meaning is the
field's attribute docstring (the string literal under the field in the model's source) or its
``Field(description=...)``, so it lives next to the field and changes with it.

Docstrings are read from the source here, when the reference is rendered, rather than with
pydantic's ``use_attribute_docstrings``: that parses every model's source at import time, which
every function cold start would pay for a text nobody reads at run time.

The rendered tables replace the blocks between ``<!-- BEGIN GENERATED: config reference NAME
-->`` and ``<!-- END GENERATED: config reference NAME -->`` in the document; the prose around
them is written by hand. ``corral config reference --update docs/configuration.md`` rewrites
them, and ``tests/unit/test_config_reference.py`` fails when they are stale.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import itertools
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from corral.domain.config.aws import AwsProvider
from corral.domain.config.cluster import ClusterConfig
from corral.domain.config.common import CommonProvider
from corral.domain.config.experiment import (
    CommandConfig,
    ExperimentConfig,
    GcsStorage,
    S3Storage,
    SharedFsStorage,
)
from corral.domain.config.gcp import GcpProvider
from corral.domain.config.hyperparameters import CategoricalHP, ConstHP, DoubleHP, IntHP, LogHP
from corral.domain.config.reference_format import (
    default_text,
    is_model,
    rules_text,
    split,
    type_name,
    union_args,
)

REFRESH_COMMAND = ".venv/bin/corral config reference --update docs/configuration.md"
_BEGIN = "<!-- BEGIN GENERATED: config reference {name} -->"
_END = "<!-- END GENERATED: config reference {name} -->"
_ROOTS: tuple[type[BaseModel], ...] = (ClusterConfig, ExperimentConfig, CommandConfig)


@dataclass(frozen=True, slots=True)
class Part:
    """One model's fields under one path prefix (``base``: leave out the fields it declares)."""

    model: type[BaseModel]
    prefix: str
    base: type[BaseModel] | None = None
    note: str = ""


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    parts: tuple[Part, ...]


_POOL = "resource_pools[]."
_PROVIDER = "resource_pools[].provider."
SECTIONS: tuple[Section, ...] = (
    Section("cluster", (Part(ClusterConfig, ""),)),
    Section("provider", (Part(CommonProvider, _PROVIDER),)),
    Section("aws", (Part(AwsProvider, _PROVIDER, base=CommonProvider),)),
    Section("gcp", (Part(GcpProvider, _PROVIDER, base=CommonProvider),)),
    Section(
        "experiment",
        (
            Part(ExperimentConfig, ""),
            Part(S3Storage, "checkpoint_storage.", note="`type: s3`"),
            Part(GcsStorage, "checkpoint_storage.", note="`type: gcs`"),
            Part(SharedFsStorage, "checkpoint_storage.", note="`type: shared_fs`"),
        ),
    ),
    Section(
        "hyperparameters",
        tuple(
            Part(hp, "hyperparameters.NAME.", note=f"`type: {_kind}`")
            for hp, _kind in (
                (ConstHP, "const"),
                (CategoricalHP, "categorical"),
                (IntHP, "int"),
                (DoubleHP, "double"),
                (LogHP, "log"),
            )
        ),
    ),
    Section("command", (Part(CommandConfig, ""),)),
)


@dataclass(frozen=True, slots=True)
class Row:
    path: str
    type: str
    default: str
    rule: str
    meaning: str


@dataclass
class _Walk:
    rows: list[Row] = field(default_factory=list)
    seen: set[tuple[type[BaseModel], str]] = field(default_factory=set)


# --- meanings ------------------------------------------------------------------------------


@cache
def _class_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the string literal right under the field in ``model``'s own source."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    found: dict[str, str] = {}
    for stmt, after in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[stmt.target.id] = inspect.cleandoc(after.value.value)
    return found


def meaning(model: type[BaseModel], name: str) -> str:
    """A field's description, from the class that declares it (or its ``description``)."""
    info = model.model_fields[name]
    if info.description:
        return info.description
    for klass in model.__mro__:
        if isinstance(klass, type) and issubclass(klass, BaseModel):
            text = _class_docstrings(klass).get(name)
            if text:
                return text
    return ""


# --- walking the models --------------------------------------------------------------------


def _nested(kind: Any) -> tuple[type[BaseModel] | None, str]:
    """The model a field holds (directly, or as list items) and the path step to its fields."""
    kind, _ = split(kind)
    args = union_args(kind)
    if len(args) == 1:
        kind = split(args[0])[0]
    if is_model(kind):
        return kind, "."
    # A value or a mapping (an image name, or {cpu, gpu}): the mapping's fields get rows.
    models = [split(a)[0] for a in union_args(kind) if is_model(split(a)[0])]
    if len(models) == 1:
        return models[0], "."
    if get_origin(kind) is tuple:
        item = split(get_args(kind)[0])[0]
        if is_model(item):
            return item, "[]."
    return None, ""


def _walk(part: Part, model: type[BaseModel], prefix: str, out: _Walk) -> None:
    skip = set(part.base.model_fields) if part.base is not None and model is part.model else set()
    # The tag of a tagged union first: it says which table applies.
    fields = sorted(model.model_fields.items(), key=lambda item: item[0] != "type")
    for name, info in fields:
        if name in skip:
            continue
        out.seen.add((model, name))
        aliases = [
            c
            for c in getattr(info.validation_alias, "choices", None) or ()
            if isinstance(c, str) and c != name
        ]
        path = f"`{prefix}{name}`" + "".join(f" (also `{a}`)" for a in aliases)
        if part.note and model is part.model:
            path += f" ({part.note})"
        row = Row(
            path=path,
            type=type_name(info.annotation, list(info.metadata)),
            default=default_text(info),
            rule=rules_text(info),
            meaning=" ".join(meaning(model, name).split()),
        )
        out.rows.append(row)
        nested, step = _nested(info.annotation)
        if nested is not None:
            _walk(part, nested, f"{prefix}{name}{step}", out)


def section_rows(section: Section) -> tuple[list[Row], set[tuple[type[BaseModel], str]]]:
    out = _Walk()
    for part in section.parts:
        _walk(part, part.model, part.prefix, out)
    return out.rows, out.seen


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_section(section: Section) -> str:
    rows, _ = section_rows(section)
    lines = ["| field | type | default | rule | meaning |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        cells = (r.path, r.type, r.default, r.rule, r.meaning)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def render_all() -> dict[str, str]:
    """Section name -> its markdown table."""
    return {s.name: render_section(s) for s in SECTIONS}


# --- checks the unit test makes ------------------------------------------------------------


def _reachable(model: type[BaseModel]) -> Iterator[type[BaseModel]]:
    yield model
    for info in model.model_fields.values():
        yield from _models_in(info.annotation)


def _models_in(kind: Any) -> Iterator[type[BaseModel]]:
    kind, _ = split(kind)
    if is_model(kind):
        yield from _reachable(kind)
        return
    for arg in get_args(kind):
        if arg is not Ellipsis and not isinstance(arg, str | int):
            yield from _models_in(arg)


def _owner(model: type[BaseModel], name: str) -> type[BaseModel]:
    """The most basic class that declares field ``name`` (subclasses may narrow its type)."""
    for klass in reversed(model.__mro__):
        if is_model(klass) and name in vars(klass).get("__annotations__", {}):
            return klass
    return model


def all_fields() -> set[tuple[type[BaseModel], str]]:
    """(model, field) of every field a cluster, experiment or command config may hold."""
    models = {m for root in _ROOTS for m in _reachable(root)}
    found = set()
    for model in models:
        for name in model.model_fields:
            found.add((_owner(model, name), name))
    return found


def undocumented() -> list[str]:
    """``Model.field`` of every field without a meaning (docstring or description)."""
    return sorted(
        f"{model.__name__}.{name}" for model, name in all_fields() if not meaning(model, name)
    )


def rendered_fields() -> set[tuple[type[BaseModel], str]]:
    """(declaring model, field) of every row the reference has."""
    found = set()
    for section in SECTIONS:
        for model, name in section_rows(section)[1]:
            found.add((_owner(model, name), name))
    return found


# --- the document --------------------------------------------------------------------------


class StaleMarkers(ValueError):
    """The document lacks a section's markers (or has them out of order)."""


def update_document(text: str, rendered: dict[str, str]) -> str:
    """``text`` with every generated block replaced by its rendered table."""
    for name, table in rendered.items():
        begin, end = _BEGIN.format(name=name), _END.format(name=name)
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.DOTALL)
        found = list(pattern.finditer(text))
        if len(found) != 1:
            raise StaleMarkers(f"needs exactly one block {begin} ... {end}")
        start, stop = found[0].span()
        text = f"{text[:start]}{begin}\n{table}\n{end}{text[stop:]}"
    return text


def stale_diff(text: str, name: str = "docs/configuration.md") -> str:
    """A unified diff from ``text`` to its refreshed form; empty when the reference is current."""
    fresh = update_document(text, render_all())
    lines = difflib.unified_diff(
        text.splitlines(keepends=True),
        fresh.splitlines(keepends=True),
        fromfile=name,
        tofile=f"{name} (generated)",
    )
    return "".join(lines)


def blocks() -> str:
    """Every generated block with its markers, as ``corral config reference`` prints them."""
    return "\n\n".join(
        f"{_BEGIN.format(name=n)}\n{t}\n{_END.format(name=n)}" for n, t in render_all().items()
    )
