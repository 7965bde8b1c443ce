"""The local stack's named users: ``users.json`` in its state directory.

Each user has a name (the owner of what they submit, and what the cluster config's
``admins`` name) and a bearer token. The file keeps only each token's SHA-256 digest
(``corral.api.auth.token_digest``): the token is printed once, when it is made. The API
reads the file again whenever it changes (``corral.api.auth.UsersFile``), so
``corral dev user add`` works while the stack runs.

The default user ``local`` gets a new token every time the stack starts (written to the
``token`` file the CLI reads, as before named users existed); other users keep theirs across
restarts until the state directory is deleted.
"""

from __future__ import annotations

import json
import re
import secrets

from corral.api.auth import parse_users, token_digest
from corral.local.state import StateDir

DEFAULT_USER = "local"
# A name that is safe in a log line, a table cell and a YAML list without quoting.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}$")


class UserError(ValueError):
    """A user that cannot be added (bad name, already there)."""


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise UserError(
            f"bad user name {name!r}: 1-64 letters, digits, '_', '.', '@', '+' or '-', "
            "starting with a letter or digit"
        )
    return name


def _read(state: StateDir) -> list[dict[str, str]]:
    text = state.read(state.users_file)
    if text is None:
        return []
    try:
        users = parse_users(text)
    except ValueError as error:
        raise UserError(f"{state.users_file} is not a users file: {error}") from None
    return [{"name": name, "token_sha256": digest} for digest, name in users.items()]


def _write(state: StateDir, entries: list[dict[str, str]]) -> None:
    state.prepare()
    state.write(state.users_file, json.dumps({"users": entries}, indent=2) + "\n")
    state.users_file.chmod(0o600)


def names(state: StateDir) -> list[str]:
    return [e["name"] for e in _read(state)]


def set_token(state: StateDir, name: str, *, replace: bool) -> str:
    """A new token for ``name``, stored as its digest; returns the token. An existing user
    is refused unless ``replace`` (their old token stops working). The default user's token
    also goes to the token file the CLI reads."""
    check_name(name)
    token = secrets.token_urlsafe(24)
    with state.locked():
        entries = _read(state)
        if not replace and any(e["name"] == name for e in entries):
            raise UserError(
                f"user {name} already exists; `corral dev user add {name} --rotate` gives "
                "them a new token"
            )
        kept = [e for e in entries if e["name"] != name]
        _write(state, [*kept, {"name": name, "token_sha256": token_digest(token)}])
        if name == DEFAULT_USER:
            # The CLI signs in as ``local`` from the token file: it follows every new token
            # (`corral dev user add local --rotate` too), or every later command gets 401.
            state.write(state.token_file, token + "\n")
            state.token_file.chmod(0o600)
    return token


def start_default_user(state: StateDir) -> str:
    """At stack start: a new token for ``local``, in the users file and the token file."""
    return set_token(state, DEFAULT_USER, replace=True)
