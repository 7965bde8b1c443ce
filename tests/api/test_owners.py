"""Users own their work: every experiment, command and trial shows its submitter; anyone may
read everything, but only the owner or an admin may kill, and only an admin may reset a
pool's breaker. Listings filter by owner (``mine``) without losing the newest matches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.api.auth import TokenAuthenticator
from corral.domain.records import EventKind
from corral.local import users
from corral.local.state import StateDir
from tests.services.harness import Cluster, make_pool

from .conftest import USER, ApiClient, snapshot
from .events import ACCOUNT, user_arn

BOB = user_arn("bob")
ADMIN = user_arn("root-operator")
ADMIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/Admin"


def _session(role: str, session: str) -> str:
    return f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{session}"


def _submit(api: ApiClient, caller: str = USER, name: str = "job") -> str:
    reply = api.post("/experiments", {"config": {"name": name, "entrypoint": "x"}}, caller=caller)
    assert reply.status == 201, reply.text
    return str(reply.json["id"])


def _kill(api: ApiClient, experiment_id: str, caller: str) -> tuple[int, Any]:
    reply = api.post(f"/experiments/{experiment_id}/kill", caller=caller)
    return reply.status, reply.json


def _refused(api: ApiClient, cluster: Cluster, path: str, caller: str) -> str:
    """POST ``path`` as ``caller``: refused (403) with nothing written; the reason."""
    before = snapshot(cluster)
    reply = api.post(path, caller=caller)
    assert reply.status == 403, reply.text
    assert snapshot(cluster) == before
    return str(reply.json["message"])


# ---- who submitted it ----------------------------------------------------------------------
def test_experiments_commands_and_trials_show_their_owner(api: ApiClient) -> None:
    experiment_id = _submit(api)
    command = api.post("/commands", {"argv": ["true"]}, caller=BOB).json
    assert command["owner"] == BOB and command["trials"][0]["owner"] == BOB
    detail = api.get(f"/experiments/{experiment_id}", caller=BOB).json  # anyone may read
    assert detail["owner"] == USER
    (trial,) = detail["trials"]
    assert trial["owner"] == USER
    assert api.get(f"/trials/{trial['id']}", caller=BOB).json["owner"] == USER
    paged = api.get(f"/experiments/{experiment_id}/trials").json["trials"]
    assert [t["owner"] for t in paged] == [USER]


def test_an_assumed_role_user_is_owned_by_role_and_session(api: ApiClient) -> None:
    alice = _session("Dev", "alice@example.com")
    experiment_id = _submit(api, caller=alice)
    assert api.get(f"/experiments/{experiment_id}").json["owner"] == alice
    # Another session of the same role is another person.
    status, error = _kill(api, experiment_id, _session("Dev", "bob@example.com"))
    assert status == 403 and alice in error["message"]
    assert _kill(api, experiment_id, alice)[0] == 200


# ---- who may kill --------------------------------------------------------------------------
def test_only_the_owner_may_kill_and_a_refusal_writes_nothing(
    api: ApiClient, cluster: Cluster
) -> None:
    experiment_id = _submit(api)
    assert _refused(api, cluster, f"/experiments/{experiment_id}/kill", BOB) == (
        f"experiment {experiment_id} belongs to {USER}; only its owner or an admin may kill it"
    )
    status, killed = _kill(api, experiment_id, USER)
    assert status == 200 and killed["state"] == "CANCELLED"
    (event,) = [e for e in cluster.store.events() if e.kind is EventKind.EXPERIMENT_KILLED]
    assert event.message == f"killed by {USER}" and event.data == {"by": USER}
    trial = cluster.store.trials(experiment_id=experiment_id)[0]
    assert trial.history[-1].reason == f"killed by {USER}"


def test_a_command_is_its_owners_too(api: ApiClient, cluster: Cluster) -> None:
    command_id = api.post("/commands", {"argv": ["sleep", "9"]}).json["id"]
    refusal = _refused(api, cluster, f"/experiments/{command_id}/kill", BOB)
    assert refusal.startswith(f"command {command_id} belongs to")


@pytest.mark.parametrize(
    ("admins", "caller"),
    [
        ((ADMIN,), ADMIN),
        ((f"arn:aws:iam::{ACCOUNT}:user/root-*",), ADMIN),  # an fnmatch pattern
        ((ADMIN_ROLE,), _session("Admin", "carol")),  # the role names all its sessions
        ((_session("Admin", "*"),), _session("Admin", "carol")),
    ],
    ids=["exact", "pattern", "role", "session-pattern"],
)
def test_an_admin_may_kill_anyones_work(
    api: ApiClient, cluster: Cluster, admins: tuple[str, ...], caller: str
) -> None:
    cluster.ctx.admins = admins
    experiment_id = _submit(api)
    status, killed = _kill(api, experiment_id, caller)
    assert status == 200 and killed["state"] == "CANCELLED"


def test_admin_patterns_match_no_one_else(api: ApiClient, cluster: Cluster) -> None:
    cluster.ctx.admins = (ADMIN_ROLE, f"arn:aws:iam::{ACCOUNT}:user/root-*")
    experiment_id = _submit(api)
    for caller in (
        _session("Administrators", "carol"),  # not the role Admin
        _session("Admin", "carol").replace(ACCOUNT, "999999999999"),  # another account
        user_arn("Root-operator"),  # patterns are case-sensitive, as ARNs are
    ):
        assert _kill(api, experiment_id, caller)[0] == 403, caller


def test_work_from_before_owners_is_for_admins_only(api: ApiClient, cluster: Cluster) -> None:
    # Records written before owners existed carry none: no one can prove they submitted it.
    experiment_id = cluster.submit().experiment.id
    assert api.get(f"/experiments/{experiment_id}").json["owner"] is None
    assert _refused(api, cluster, f"/experiments/{experiment_id}/kill", USER) == (
        f"experiment {experiment_id} has no recorded owner; only an admin may kill it"
    )
    cluster.ctx.admins = (ADMIN,)
    assert _kill(api, experiment_id, ADMIN)[0] == 200


def test_killing_an_unknown_experiment_is_still_404(api: ApiClient) -> None:
    assert _kill(api, "exp-nope", BOB)[0] == 404


# ---- the breaker ---------------------------------------------------------------------------
def _open_breaker(cluster: Cluster) -> None:
    from dataclasses import replace

    state = cluster.store.pool_state("gpu")
    now = cluster.clock.now()
    cluster.store.commit(
        [replace(state, boot_failures=5, breaker_open_since=now, breaker_reason="boots fail")]
    )


def test_only_an_admin_may_reset_a_breaker(api: ApiClient, cluster: Cluster) -> None:
    _open_breaker(cluster)
    assert _refused(api, cluster, "/pools/gpu/reset-breaker", USER) == (
        f"only an admin may reset the breaker of pool gpu ({USER} is not one of the "
        "cluster config's admins)"
    )
    assert api.get("/pools").json["pools"][0]["breaker"]["open"] is True

    cluster.ctx.admins = (ADMIN,)
    reply = api.post("/pools/gpu/reset-breaker", caller=ADMIN)
    assert reply.status == 200, reply.text
    assert reply.json["name"] == "gpu"
    assert reply.json["breaker"] == {
        "open": False,
        "since": None,
        "boot_failures": 0,
        "reason": None,
    }
    (event,) = [e for e in cluster.store.events() if e.kind is EventKind.BREAKER_RESET]
    assert event.pool == "gpu" and event.data == {"by": ADMIN}
    assert event.message == f"breaker reset by {ADMIN} (it was open, 5 boot failure(s))"


def test_reset_breaker_of_an_unknown_pool(api: ApiClient, cluster: Cluster) -> None:
    # A non-admin learns nothing about which pools exist.
    assert api.post("/pools/nope/reset-breaker", caller=USER).status == 403
    cluster.ctx.admins = (ADMIN,)
    reply = api.post("/pools/nope/reset-breaker", caller=ADMIN)
    assert reply.status == 404 and reply.json["message"] == "no pool nope"


# ---- listing by owner ----------------------------------------------------------------------
def test_mine_and_owner_filter_the_newest_first(api: ApiClient, cluster: Cluster) -> None:
    mine = []
    for n in range(3):
        mine.append(_submit(api, USER, f"mine-{n}"))
        cluster.clock.advance(1)
    # Many newer experiments of someone else: a filter applied to the newest `limit` only
    # would find none of USER's.
    for n in range(40):
        _submit(api, BOB, f"bob-{n}")
        cluster.clock.advance(1)
    listed = api.get("/experiments", query={"mine": True, "limit": 2}).json
    assert [e["id"] for e in listed["experiments"]] == [mine[2], mine[1]]
    assert listed["truncated"] is False
    everything = api.get("/experiments", query={"mine": True}).json["experiments"]
    assert [e["id"] for e in everything] == mine[::-1]
    bobs = api.get("/experiments", query={"owner": BOB, "limit": 500}).json["experiments"]
    assert len(bobs) == 40 and {e["owner"] for e in bobs} == {BOB}
    assert len(api.get("/experiments", query={"limit": 10}).json["experiments"]) == 10
    as_bob = api.get("/experiments", query={"mine": True, "limit": 1}, caller=BOB).json
    assert as_bob["experiments"][0]["name"] == "bob-39"


def test_mine_with_another_owner_is_refused(api: ApiClient) -> None:
    reply = api.get("/experiments", query={"mine": True, "owner": BOB})
    assert reply.status == 422
    assert reply.json["errors"][0]["field"] == "owner"
    same = api.get("/experiments", query={"mine": True, "owner": USER})
    assert same.status == 200


def test_an_owner_filter_says_when_it_stopped_searching(
    api: ApiClient, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.api import views

    monkeypatch.setattr(views, "MAX_OWNER_SCAN", 8)
    _submit(api, USER)
    for _ in range(10):
        cluster.clock.advance(1)
        _submit(api, BOB)
    listed = api.get("/experiments", query={"mine": True}).json
    assert listed == {"experiments": [], "truncated": True}


# ---- local-stack users -----------------------------------------------------------------------
def test_a_user_added_to_the_users_file_can_call_at_once(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    local_token = users.start_default_user(state)
    cluster = Cluster(make_pool())
    cluster.ctx.admins = (users.DEFAULT_USER,)
    api = ApiClient(cluster, TokenAuthenticator({}, None, state.users_file))

    def call(method: str, path: str, token: str, **kwargs: Any) -> tuple[int, Any]:
        reply = api.call(method, path, caller=None, bearer=token, **kwargs)
        return reply.status, reply.json

    assert call("GET", "/experiments", "not-yet")[0] == 401
    bob_token = users.set_token(state, "bob", replace=False)  # while the API runs
    status, created = call("POST", "/experiments", bob_token, body={"config": {"entrypoint": "x"}})
    assert status == 201 and created["owner"] == "bob"
    status, _ = call("POST", f"/experiments/{created['id']}/kill", "x" + bob_token)
    assert status == 401
    _, mine = call("GET", "/experiments", local_token, query={"mine": True})
    assert mine["experiments"] == []
    # The stack's default user administers it.
    status, killed = call("POST", f"/experiments/{created['id']}/kill", local_token, body={})
    assert status == 200 and killed["state"] == "CANCELLED"
    # A new token for bob: the old one stops working.
    new_token = users.set_token(state, "bob", replace=True)
    assert call("GET", "/experiments", bob_token)[0] == 401
    assert call("GET", "/experiments", new_token)[0] == 200
