"""Who may change what (``corral.domain.access``), the config's ``admins`` that feed it, and
the services that apply it: ``kill.kill_experiment(by=...)`` and ``pools.reset_breaker``."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from corral.domain.access import admin_refusal, admins_with, change_refusal, is_admin, names_of
from corral.domain.config import ConfigError, ExperimentConfig, load_cluster_config
from corral.domain.errors import Forbidden, NotFoundError
from corral.domain.records import EventKind
from corral.domain.trial import TrialState
from corral.handlers.aws import composition as aws_composition
from corral.handlers.gcp import composition as gcp_composition
from corral.services import kill, pools
from corral.services.submit import submit_experiment

from .harness import Cluster

ACCT = "123456789012"
ALICE = f"arn:aws:iam::{ACCT}:user/alice"
SESSION = f"arn:aws:sts::{ACCT}:assumed-role/Ops/carol@example.com"
ROLE = f"arn:aws:iam::{ACCT}:role/Ops"
POOL_YAML = """
resource_pools:
  - name: gpu
    provider: {type: aws, region: us-east-1, image_id: ami-12345678, instance_type: g5.xlarge}
"""


# ---- the rule ----------------------------------------------------------------------------
def test_a_role_session_is_also_matched_as_its_role() -> None:
    assert names_of(SESSION) == (SESSION, ROLE)
    assert names_of(ALICE) == (ALICE,)
    assert names_of("alice@example.com") == ("alice@example.com",)
    china = "arn:aws-cn:sts::123456789012:assumed-role/Ops/x"
    assert names_of(china)[1] == "arn:aws-cn:iam::123456789012:role/Ops"


@pytest.mark.parametrize(
    ("principal", "admins", "expected"),
    [
        (SESSION, [ROLE], True),
        (SESSION, [f"arn:aws:sts::{ACCT}:assumed-role/Ops/*"], True),
        (SESSION, [f"arn:aws:sts::{ACCT}:assumed-role/Ops/dave@example.com"], False),
        (SESSION, [f"arn:aws:iam::{ACCT}:role/Op"], False),
        (ALICE, [f"arn:aws:iam::{ACCT}:user/*"], True),
        (ALICE, [f"arn:aws:iam::{ACCT}:user/ALICE"], False),  # case-sensitive
        ("local", ["local"], True),
        ("local", [], False),
        ("alice@example.com", ["*@example.com"], True),
    ],
)
def test_is_admin(principal: str, admins: list[str], expected: bool) -> None:
    assert is_admin(principal, admins) is expected


def test_change_refusal_says_why() -> None:
    assert change_refusal(ALICE, [], owner=ALICE, what="experiment e", action="kill") is None
    assert change_refusal(ROLE, [ROLE], owner=ALICE, what="experiment e", action="kill") is None
    assert change_refusal("bob", [], owner=ALICE, what="experiment e", action="kill") == (
        f"experiment e belongs to {ALICE}; only its owner or an admin may kill it"
    )
    assert change_refusal("bob", [], owner=None, what="experiment e", action="kill") == (
        "experiment e has no recorded owner; only an admin may kill it"
    )
    assert change_refusal("root", ["root"], owner=None, what="x", action="kill") is None
    assert admin_refusal("root", ["root"], action="reset") is None
    assert "bob is not one of" in (admin_refusal("bob", ["root"], action="reset") or "")


def test_admins_from_the_environment_are_added() -> None:
    assert admins_with(("a", "b"), " b, c ,,") == ("a", "b", "c")
    assert admins_with((), "") == ()


# ---- the config ---------------------------------------------------------------------------
def test_the_cluster_config_names_admins() -> None:
    assert load_cluster_config(POOL_YAML).config.admins == ()
    loaded = load_cluster_config(f"admins: [local, '{ROLE}', '*@example.com']\n" + POOL_YAML)
    assert loaded.config.admins == ("local", ROLE, "*@example.com")
    assert load_cluster_config("admins: local\n" + POOL_YAML).config.admins == ("local",)


@pytest.mark.parametrize(
    ("admins", "problem"),
    [
        ("['']", "admins[0]: must not be empty"),
        ("[ok, ' padded']", "admins[1]: ' padded' has leading or trailing blanks"),
        ("[ok, ok]", "admins: 'ok' is listed twice"),
        ("{a: 1}", "admins"),
        ("[[x]]", "admins[0]: must be a string"),
    ],
)
def test_bad_admins_are_refused_naming_the_entry(admins: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_cluster_config(f"admins: {admins}\n" + POOL_YAML)
    assert any(str(p).startswith(problem) for p in refused.value.problems), refused.value


def test_both_compositions_carry_the_admins_into_the_context() -> None:
    text = "admins: [alice]\n" + POOL_YAML
    aws = aws_composition.context_from_env(
        {"CORRAL_CLUSTER_CONFIG": text, "CORRAL_ADMINS": "local"}
    )
    assert aws.admins == ("alice", "local")
    gcp_pool = {
        "name": "gpu",
        "provider": {
            "type": "gcp",
            "project": "proj-123",
            "zone": "us-central1-a",
            "boot_disk_source_image": "projects/p/global/images/agent",
        },
    }
    gcp_text = json.dumps({"admins": ["ops@example.com"], "resource_pools": [gcp_pool]})
    gcp = gcp_composition.context_from_env(
        {"CORRAL_CLUSTER_CONFIG": gcp_text, "GOOGLE_CLOUD_PROJECT": "proj-123"}
    )
    assert gcp.admins == ("ops@example.com",)


# ---- the services -------------------------------------------------------------------------
def test_kill_checks_the_caller_before_writing() -> None:
    cluster = Cluster()
    config = ExperimentConfig.model_validate({"entrypoint": "x"})
    submitted = submit_experiment(cluster.ctx, config, owner=ALICE)
    experiment_id = submitted.experiment.id
    with pytest.raises(Forbidden):
        kill.kill_experiment(cluster.ctx, experiment_id, by="bob")
    assert cluster.store.get_experiment(experiment_id).killed_at is None  # type: ignore[union-attr]
    assert cluster.store.events(limit=1000)[-1].kind is EventKind.EXPERIMENT_SUBMITTED
    killed = kill.kill_experiment(cluster.ctx, experiment_id, by=ALICE)
    assert killed.killed_at is not None
    trial = cluster.trial(submitted.trials[0].id)
    assert trial.state is TrialState.CANCELLED and trial.history[-1].reason == f"killed by {ALICE}"
    # A trusted caller inside the control plane (by=None) is not checked.
    other = cluster.submit().experiment.id
    assert kill.kill_experiment(cluster.ctx, other).killed_at is not None


def test_reset_breaker_service() -> None:
    cluster = Cluster()
    state = cluster.store.pool_state("gpu")
    cluster.store.commit([replace(state, boot_failures=2)])  # counting, not yet open
    with pytest.raises(Forbidden):
        pools.reset_breaker(cluster.ctx, "nope", by="bob")  # refused before the lookup
    cluster.ctx.admins = ("root",)
    with pytest.raises(NotFoundError):
        pools.reset_breaker(cluster.ctx, "nope", by="root")
    reset = pools.reset_breaker(cluster.ctx, "gpu", by="root")
    assert reset.boot_failures == 0 and cluster.store.pool_state("gpu") == reset
    again = pools.reset_breaker(cluster.ctx, "gpu", by="root")  # nothing to reset: audited
    assert again == reset
    messages = [e.message for e in cluster.store.events() if e.kind is EventKind.BREAKER_RESET]
    assert messages == [
        "breaker reset by root (it was closed, 2 boot failure(s))",
        "breaker reset by root (it was closed, 0 boot failure(s))",
    ]
