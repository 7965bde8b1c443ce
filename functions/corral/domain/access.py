"""Who may change what: every user reads everything, changes only their own work; admins all.

A *principal name* is what the API's authenticator names a user: the caller's IAM ARN when
deployed on AWS, the verified Google email on GCP, the token's user name on the local stack.
An experiment (a command is one) records its submitter's name as ``owner``; its trials are
its owner's too.

Admins are the cluster config's ``admins``: exact names or ``fnmatch`` patterns (``*``,
``?``, ``[...]``; case-sensitive). On AWS a role's users are STS sessions
(``arn:aws:sts::<acct>:assumed-role/<role>/<session>``), and a user is named by that whole
ARN: the session (an SSO user's email, say) tells the people sharing a role apart, so the
*owner* is the role and session together. An admin pattern may name either: the session ARN
(``.../assumed-role/Admin/*`` for every session of ``Admin``) or the role itself
(``arn:aws:iam::<acct>:role/Admin``), which matches all of its sessions.

Experiments stored before owners were recorded have none: only admins may change them. No
one can prove to be their submitter, and "anyone" would undo the rule for all old work.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fnmatch import fnmatchcase

_ASSUMED_ROLE = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/[^/]+$"
)


def names_of(principal: str) -> tuple[str, ...]:
    """The names an admin pattern may match for ``principal``: itself and, for an STS
    assumed-role session, the IAM role it is a session of."""
    match = _ASSUMED_ROLE.match(principal)
    if match is None:
        return (principal,)
    role = f"arn:{match['partition']}:iam::{match['account']}:role/{match['role']}"
    return (principal, role)


def admins_with(configured: Iterable[str], extra: str) -> tuple[str, ...]:
    """The configured admins, then those of ``extra`` (comma-separated), without repeats."""
    added = (a.strip() for a in extra.split(","))
    return tuple(dict.fromkeys([*configured, *(a for a in added if a)]))


def is_admin(principal: str, admins: Iterable[str]) -> bool:
    names = names_of(principal)
    return any(fnmatchcase(name, pattern) for pattern in admins for name in names)


def change_refusal(
    principal: str, admins: Iterable[str], *, owner: str | None, what: str, action: str
) -> str | None:
    """Why ``principal`` may not ``action`` ``what`` (owned by ``owner``), or None if it may.

    ``what`` names the record ("experiment exp-1"), ``action`` the verb ("kill")."""
    if owner is not None and principal == owner:
        return None
    if is_admin(principal, admins):
        return None
    if owner is None:
        return f"{what} has no recorded owner; only an admin may {action} it"
    return f"{what} belongs to {owner}; only its owner or an admin may {action} it"


def admin_refusal(principal: str, admins: Iterable[str], *, action: str) -> str | None:
    """Why ``principal`` may not do the admin-only ``action``, or None if it may."""
    if is_admin(principal, admins):
        return None
    return f"only an admin may {action} ({principal} is not one of the cluster config's admins)"
