"""How the configuration reference spells a field's type, default and constraints.

Read from the pydantic field (its annotation, metadata and default); the validators that
define a kind of value (durations, one-or-many lists, non-empty strings) are recognised by
identity, so a type built from them reads as the user writes it.
"""

from __future__ import annotations

import types
from decimal import Decimal
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from corral.domain.config import common, durations


def split(annotation: Any) -> tuple[Any, list[Any]]:
    """(bare type, metadata) of a possibly ``Annotated`` type."""
    metadata: list[Any] = []
    while get_origin(annotation) is Annotated:
        args = get_args(annotation)
        annotation, metadata = args[0], [*args[1:], *metadata]
    return annotation, metadata


def _funcs(metadata: list[Any]) -> set[Any]:
    return {getattr(m, "func", None) for m in metadata}


def is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def union_args(kind: Any) -> tuple[Any, ...]:
    if get_origin(kind) in (Union, types.UnionType):
        return tuple(a for a in get_args(kind) if a is not type(None))
    return ()


def type_name(kind: Any, metadata: list[Any]) -> str:
    kind, inner = split(kind)
    metadata = [*metadata, *inner]
    funcs = _funcs(metadata)
    if common._fallback_delay in funcs:
        return "duration or `never`"
    if durations._validate in funcs:
        return "duration"
    args = union_args(kind)
    if len(args) > 1 and all(is_model(split(a)[0]) for a in args):
        tags = [_literal_tag(split(a)[0]) for a in args]
        return "mapping (`type`: " + " / ".join(f"`{t}`" for t in tags) + ")"
    if args:
        names = dict.fromkeys(type_name(a, []) for a in args)
        return " or ".join(names)
    origin = get_origin(kind)
    if origin is Literal:
        return " / ".join(f"`{v}`" for v in get_args(kind))
    if origin is tuple:
        item = type_name(get_args(kind)[0], [])
        plural = {"any": "values"}.get(
            item, "mappings" if item.startswith("mapping") else f"{item}s"
        )
        if common._one_or_many in funcs:
            return f"{item} or list of {plural}"
        return f"list of {plural}"
    if origin is dict:
        key, value = get_args(kind)
        if value is Any:
            return "mapping"
        return f"mapping of {type_name(key, [])} to {type_name(value, [])}"
    if is_model(kind):
        return "mapping"
    simple = {str: "string", int: "integer", float: "number", bool: "boolean", Decimal: "decimal"}
    simple[SecretStr] = "string (secret)"
    if kind is Any:
        return "any"
    return simple.get(kind, getattr(kind, "__name__", str(kind)))


def _literal_tag(model: type[BaseModel]) -> str:
    info = model.model_fields.get("type")
    if info is not None and get_origin(info.annotation) is Literal:
        return str(get_args(info.annotation)[0])
    return model.__name__


def _flow(value: Any) -> str:
    """A value as YAML flow text: ``[a, b]``, ``{k: v}``, ``true``."""
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_defaults=True, mode="json")
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if str(value) else '""'


def default_text(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return f"`{_flow(info.get_default(call_default_factory=True))}`"
    value = info.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "none"
    if isinstance(value, BaseModel) and not value.model_dump(exclude_defaults=True):
        return "(fields below)"
    funcs = _funcs([*info.metadata, *split(info.annotation)[1]])
    if isinstance(value, float) and funcs & {durations._validate, common._fallback_delay}:
        return f"`{durations.format_duration(value)}`"
    return f"`{_flow(value)}`"


def rules_text(info: FieldInfo) -> str:
    kind, inner = split(info.annotation)
    metadata = [*info.metadata, *inner]
    items = get_args(kind)[0] if get_origin(kind) is tuple else None
    item_funcs = _funcs(split(items)[1]) if items is not None else set()
    found: list[str] = []
    for m in metadata:
        if isinstance(m, at.Ge):
            found.append(f">= {m.ge}")
        elif isinstance(m, at.Gt):
            found.append(f"> {m.gt}")
        elif isinstance(m, at.Le):
            found.append(f"<= {m.le}")
        elif isinstance(m, at.Lt):
            found.append(f"< {m.lt}")
        elif isinstance(m, at.MinLen):
            unit = "item" if items is not None else "character"
            found.append(f"at least {m.min_length} {unit}" + ("s" if m.min_length != 1 else ""))
        elif isinstance(m, at.MaxLen):
            found.append(f"at most {m.max_length:,} characters")
    funcs = _funcs(metadata)
    if common.non_empty_str in funcs | item_funcs:
        found.append("not empty")
    if common.unique in funcs:
        found.append("no repeats")
    return "; ".join(found)
