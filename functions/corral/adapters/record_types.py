"""Reading a record dataclass's field types: what the type-hint driven codecs of every store
(DynamoDB, Firestore) share, so a field added to a record is stored everywhere unchanged."""

from __future__ import annotations

import types
import typing
from functools import cache
from typing import Any, get_args, get_origin, get_type_hints


@cache
def _cached_hints(cls: Any) -> dict[str, Any]:
    return get_type_hints(cls)


def hints(cls: type) -> dict[str, Any]:
    """Field name -> resolved type, computed once per class."""
    return _cached_hints(cls)


def optional_inner(tp: Any) -> Any | None:
    """``X`` for ``X | None`` (or ``Optional[X]``), else None."""
    if get_origin(tp) in (types.UnionType, typing.Union):
        inner = [a for a in get_args(tp) if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported union {tp!r}: only X | None is stored")
        return inner[0]
    return None


def is_json(tp: Any) -> bool:
    """Free-form JSON fields (``Any``, ``dict[str, Any]``): stored whole, never queried."""
    return tp is Any or (get_origin(tp) is dict and get_args(tp)[1:] == (Any,))
