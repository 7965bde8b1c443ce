"""The one rule for text users give Corral that is stored or shown, and how it is shown.

Every string a user sends is stored (DynamoDB, Firestore) and shown to every other user (the
CLI's tables, the dashboard): an experiment's name, its description, a command line, an
environment variable, a hyperparameter, an idempotency token, a pool name in a query. Three
kinds, from strictest to loosest:

- ``LINE``: names, ids, keys, pool names: one line of visible text. No control characters
  (C0, DEL, C1: ESC sequences, newlines and tabs included) and no bidirectional overrides or
  isolates (U+202A-U+202E, U+2066-U+2069: they reorder what follows them on the screen).
  Never empty.
- ``PROSE``: free text for people (a description): lines of text; tab, newline and carriage
  return are the only control characters.
- ``DATA``: what a trial receives (its command line, environment values, hyperparameter
  values, startup scripts): passed on as given, except NUL (execve and ``docker run`` end a
  string there).

All three are Unicode scalar values only: a lone surrogate (``"\\ud800"`` in JSON) is not
text, and DynamoDB's client cannot even encode it (the write failed after its retries: a 500).
Bounds are per field and named in the reason (``must be at most 256 characters``).

Stored records written before this rule may hold anything, so what shows stored text escapes
it (:func:`visible`) instead of trusting it; and the rule is checked where text comes in (the
API's request models and query parameters, ``corral.domain.config.validate``), not when a
stored config is read back, so an old experiment keeps running.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from collections.abc import Iterator, Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

# The error type of Corral's own rules: the config's error reporting reads the reason from its
# context (``corral.domain.config.errors.CUSTOM_ERROR_TYPE``, the same string: a test checks).
RULE_ERROR_TYPE = "corral"
# Set while text comes in (``corral.domain.config.validate``), so that a stored config read
# back later (an agent's next trial) is not refused by a rule that came after it. A context
# variable, not pydantic's validation context: the config models' ``_prepare`` hooks (the
# environment variables' names) cannot see the latter.
_SUBMITTED: contextvars.ContextVar[bool] = contextvars.ContextVar("submitted", default=False)

MAX_NAME_CHARS = 256  # experiment names, hyperparameter and environment variable names
MAX_ID_CHARS = 256  # ids and names in a path or a query (ours are far shorter)
MAX_TOKEN_CHARS = 128  # client_token
MAX_QUERY_CHARS = 2048  # a principal in ?owner= (an IAM ARN may be long)

NOT_UNICODE = "must be valid Unicode text, without lone surrogates"
NUL = "\0"
NO_NUL = "must not contain a NUL character"
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
PROSE_CONTROLS = frozenset("\t\n\r")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


class Kind(enum.Enum):
    LINE = "line"
    PROSE = "prose"
    DATA = "data"


def _surrogate(char: str) -> bool:
    return 0xD800 <= ord(char) <= 0xDFFF


def _control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code <= 0x9F


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def problem(value: str, kind: Kind, max_chars: int | None = None) -> str | None:
    """Why ``value`` breaks the rule for ``kind`` (the first character that does, escaped,
    and where), or None."""
    if kind is Kind.LINE and not value:
        return "must not be empty"
    for i, char in enumerate(value):
        where = f"({_escape(char)} at character {i + 1})"
        if _surrogate(char):
            return f"{NOT_UNICODE} {where}"
        if char == NUL:
            return NO_NUL
        if kind is Kind.DATA:
            continue
        if _control(char) and not (kind is Kind.PROSE and char in PROSE_CONTROLS):
            allowed = " other than tab and newline" if kind is Kind.PROSE else ""
            return f"must not contain control characters{allowed} {where}"
        if kind is Kind.LINE and char in BIDI_CONTROLS:
            return f"must not contain bidirectional controls {where}"
    if max_chars is not None and len(value) > max_chars:
        return f"must be at most {max_chars:,} characters"
    return None


@contextlib.contextmanager
def submission() -> Iterator[None]:
    """Validation inside this block checks the rule on config fields (a user's submission)."""
    token = _SUBMITTED.set(True)
    try:
        yield
    finally:
        _SUBMITTED.reset(token)


def submitted() -> bool:
    """True while a submission is validated (see :func:`submission`)."""
    return _SUBMITTED.get()


def rule_error(reason: str) -> PydanticCustomError:
    return PydanticCustomError(RULE_ERROR_TYPE, "{reason}", {"reason": reason, "at": ""})


def checked(kind: Kind, max_chars: int | None = None, *, always: bool = False) -> BeforeValidator:
    """The rule as a pydantic validator (``Annotated[str, checked(Kind.LINE, 256)]``). It runs
    before pydantic's own string checks, which would answer a lone surrogate with "unable to
    parse raw data as a unicode string". Config models check it only when validating a
    submission (:func:`submission`); ``always`` for request models."""

    def check(value: Any) -> Any:
        if isinstance(value, str) and (always or submitted()):
            reason = problem(value, kind, max_chars)
            if reason is not None:
                raise rule_error(reason)
        return value

    return BeforeValidator(check)


# Request fields and query parameters: always checked.
Token = Annotated[str, checked(Kind.LINE, MAX_TOKEN_CHARS, always=True)]
Argument = Annotated[str, checked(Kind.DATA, always=True)]
# Config fields: checked on submission.
Name = Annotated[str, checked(Kind.LINE, MAX_NAME_CHARS)]
Prose = Annotated[str, checked(Kind.PROSE)]
Data = Annotated[str, checked(Kind.DATA)]


def checked_keys(kind: Kind, max_chars: int | None = None) -> BeforeValidator:
    """The rule for the keys of a mapping field (hyperparameter names), checked on
    submission; the key goes in the reason, quoted, since a path cannot show it."""

    def check(value: Any) -> Any:
        if isinstance(value, Mapping) and submitted():
            for key in value:
                reason = problem(key, kind, max_chars) if isinstance(key, str) else None
                if reason is not None:
                    raise rule_error(f"name {key!r} {reason}")
        return value

    return BeforeValidator(check)


def query(max_chars: int = MAX_ID_CHARS) -> BeforeValidator:
    """A query parameter's value: one line, not empty (``?pool=`` is a 422, not a lookup of
    the empty name, which DynamoDB refuses with a 500)."""
    return checked(Kind.LINE, max_chars, always=True)


def problems_in(
    data: object, at: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path, reason) for every string key and value anywhere in ``data`` that is not
    ``DATA`` (lone surrogates, NUL): the floor every stored config meets, whatever the field's
    type (a constant hyperparameter holds any JSON). A key is reported at its mapping. The
    depth is bounded by the parsers (``MAX_DEPTH``, ``MAX_JSON_DEPTH``)."""
    if isinstance(data, str):
        reason = problem(data, Kind.DATA)
        if reason is not None:
            yield at, reason
    elif isinstance(data, Mapping):
        for key, item in data.items():
            reason = problem(key, Kind.DATA) if isinstance(key, str) else None
            if reason is not None:
                yield at, f"key {key!r}: {reason}"
            else:
                yield from problems_in(item, (*at, key))
    elif isinstance(data, list | tuple):
        for i, item in enumerate(data):
            yield from problems_in(item, (*at, i))


def visible(text: str, keep: str = "") -> str:
    """``text`` safe to print on a terminal or a page: control characters (ESC, newlines,
    C1), bidirectional controls, line and paragraph separators and lone surrogates are
    shown escaped (``\\x1b``, ``\\n``, ``\\u202e``), except those in ``keep``."""
    if all(" " <= c < "\x7f" for c in text):
        return text  # the common case, quickly
    return "".join(
        _escape(c)
        if c not in keep
        and (_control(c) or c in BIDI_CONTROLS or c in "\u2028\u2029" or _surrogate(c))
        else c
        for c in text
    )
