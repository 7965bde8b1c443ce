"""IAM of both deployments, checked by rule (tests/infra/iam_rules.py): no wildcard action,
every EC2 mutation conditioned on the ownership tag, ``iam:PassRole`` only for the agent role
to EC2, the agent role confined to its log group and metric namespace; on GCP the same
ideas in role bindings. Each rule is also fed a deliberately bad policy, so none can pass
vacuously."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.infra import iam_rules
from tests.infra.iam_rules import Binding, Statement

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "template.yaml"
DEPLOY_SH = ROOT / "infra" / "gcp" / "deploy.sh"
GCP_CONFIG = ROOT / "tests" / "fixtures" / "gcp" / "cluster.yaml"
AGENT_ROLE_ARN = "${AgentRoleArn}"  # the Fn::Sub variable scale-up's policy names
AGENT_LOG_GROUP = [
    {"Fn::GetAtt": ["AgentLogGroup", "Arn"]},
    {
        "Fn::Sub": "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:"
        "log-group:${AgentLogGroupName}:log-stream:*"
    },
]
AGENT_NAMESPACE = {"Ref": "AgentMetricsNamespace"}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return iam_rules.load_template(TEMPLATE.read_text())


@pytest.fixture(scope="module")
def policies(template: dict[str, Any]) -> dict[str, list[Statement]]:
    return iam_rules.statements(template)


def _all(policies: dict[str, list[Statement]]) -> list[Statement]:
    return [s for stmts in policies.values() for s in stmts]


def _stmt(actions: list[str], resources: list[Any], condition: Any = None) -> Statement:
    return Statement("Bad/s", "Allow", tuple(actions), tuple(resources), condition or {})


OWNED = {"StringEquals": {"ec2:ResourceTag/${TagKey}": "${TagValue}"}}


# ---- the template --------------------------------------------------------------------------
def test_the_reader_sees_every_role_and_policy(policies: dict[str, list[Statement]]) -> None:
    roles = {"ApiRole", "ScheduleRole", "ScaleUpRole", "IdleReapRole", "SpotReconcileRole"}
    assert roles | {"AgentRole", "InterruptionsQueuePolicy"} <= set(policies)
    # The Fn::Sub JSON policies are read too (the EC2 grants live there).
    actions = {a for s in policies["ScaleUpRole"] for a in s.actions}
    assert {"ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"} <= actions
    assert {"cloudwatch:PutMetricData"} <= {a for s in policies["AgentRole"] for a in s.actions}
    # Both branches of the trial role's checkpoint-bucket Fn::If are checked (checkpoints
    # are the trials' business: the agent role has no S3 access of its own).
    trial = {a for s in policies["TrialAccessPolicy"] for a in s.actions}
    assert {"s3:GetObject", "s3:PutObject", "s3:ListBucket"} <= trial


def test_no_wildcard_action(policies: dict[str, list[Statement]]) -> None:
    assert iam_rules.wildcard_actions(_all(policies)) == []


def test_every_ec2_mutation_is_tag_conditioned(policies: dict[str, list[Statement]]) -> None:
    stmts = _all(policies)
    mutations = {a for s in stmts for a in s.actions if a.startswith("ec2:")}
    assert {"ec2:TerminateInstances", "ec2:CancelSpotInstanceRequests"} <= mutations
    assert {"ec2:StopInstances", "ec2:StartInstances"} <= mutations  # the warm pool
    assert iam_rules.untagged_ec2_mutations(stmts) == []


def test_pass_role_only_for_the_agent_role_to_ec2(policies: dict[str, list[Statement]]) -> None:
    passing = [s for s in _all(policies) if "iam:PassRole" in s.actions]
    assert [s.where.split("/")[0] for s in passing] == ["ScaleUpRole"]
    assert iam_rules.pass_role_problems(_all(policies), AGENT_ROLE_ARN) == []


def test_the_agent_role_arn_passed_is_the_agent_role(template: dict[str, Any]) -> None:
    # ${AgentRoleArn} is bound by the Fn::Sub's variable map: the stack's AgentRole, or the
    # named existing role.
    (policy,) = [
        p
        for p in template["Resources"]["ScaleUpRole"]["Properties"]["Policies"]
        if p["PolicyName"] == "scale-up-ec2"
    ]
    bound = policy["PolicyDocument"]["Fn::Sub"][1]["AgentRoleArn"]["Fn::If"]
    assert bound[1] == {"Fn::GetAtt": ["AgentRole", "Arn"]}
    assert bound[2]["Fn::Sub"].endswith(":role/${AgentRoleName}")


def test_agent_role_keeps_to_its_log_group_and_namespace(
    policies: dict[str, list[Statement]],
) -> None:
    agent = policies["AgentRole"]
    assert any("logs:PutLogEvents" in s.actions for s in agent)
    assert iam_rules.agent_scope_problems(agent, AGENT_LOG_GROUP, AGENT_NAMESPACE) == []


# ---- each rule fails on a bad policy ---------------------------------------------------------
@pytest.mark.parametrize("action", ["*", "ec2:*", "ec2:Terminate*"])
def test_a_wildcard_action_is_flagged(action: str) -> None:
    assert iam_rules.wildcard_actions([_stmt([action], ["*"])])


def test_not_action_is_flagged() -> None:
    bad = Statement("Bad/s", "Allow", ("iam:CreateUser",), ("*",), {}, not_action=True)
    assert iam_rules.wildcard_actions([bad])


@pytest.mark.parametrize(
    "bad",
    [
        _stmt(["ec2:TerminateInstances"], ["arn:aws:ec2:*:1:instance/*"]),
        _stmt(["ec2:StopInstances"], ["*"], {"StringEquals": {"ec2:ResourceTag/other": "x"}}),
        _stmt(["ec2:StartInstances"], ["arn:aws:ec2:*:1:instance/*"]),
        _stmt(["ec2:CancelSpotInstanceRequests"], ["*"], {"StringLike": OWNED["StringEquals"]}),
        # Right key, wrong value: another installation's instances.
        _stmt(
            ["ec2:TerminateInstances"], ["*"], {"StringEquals": {"ec2:ResourceTag/${TagKey}": "x"}}
        ),
        # Creating instances (not only using an AMI) needs the request tag.
        _stmt(["ec2:RunInstances"], ["arn:aws:ec2:*:1:instance/*", "arn:aws:ec2:*::image/*"]),
        _stmt(["ec2:RunInstances"], ["*"]),
        # Tagging outside RunInstances could adopt a foreign instance, then terminate it.
        _stmt(
            ["ec2:CreateTags"], ["*"], {"StringEquals": {"aws:RequestTag/${TagKey}": "${TagValue}"}}
        ),
    ],
)
def test_an_untagged_ec2_mutation_is_flagged(bad: Statement) -> None:
    assert iam_rules.untagged_ec2_mutations([bad])


def test_what_ec2_cannot_tag_condition_is_not_flagged() -> None:
    fine = [
        _stmt(["ec2:DescribeInstances"], ["*"]),
        _stmt(["ec2:RunInstances"], ["arn:aws:ec2:*::image/*", "arn:aws:ec2:*:1:subnet/*"]),
        _stmt(["ec2:TerminateInstances"], ["*"], OWNED),
    ]
    assert iam_rules.untagged_ec2_mutations(fine) == []


@pytest.mark.parametrize(
    "bad",
    [
        _stmt(
            ["iam:PassRole"], ["*"], {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
        ),
        _stmt(["iam:PassRole"], [AGENT_ROLE_ARN]),
        _stmt(
            ["iam:PassRole"],
            [AGENT_ROLE_ARN],
            {"StringEquals": {"iam:PassedToService": "lambda.amazonaws.com"}},
        ),
        _stmt(["iam:*"], [AGENT_ROLE_ARN]),
    ],
)
def test_a_loose_pass_role_is_flagged(bad: Statement) -> None:
    assert iam_rules.pass_role_problems([bad], AGENT_ROLE_ARN)


@pytest.mark.parametrize(
    "bad",
    [
        _stmt(["logs:PutLogEvents"], ["*"]),
        _stmt(
            ["logs:CreateLogStream"], [AGENT_LOG_GROUP[0], "arn:aws:logs:*:1:log-group:/other:*"]
        ),
        _stmt(["cloudwatch:PutMetricData"], ["*"]),
        _stmt(["cloudwatch:PutMetricData"], ["*"], {"StringLike": {"cloudwatch:namespace": "*"}}),
        _stmt(
            ["cloudwatch:PutMetricAlarm"],
            ["*"],
            {"StringEquals": {"cloudwatch:namespace": AGENT_NAMESPACE}},
        ),
    ],
)
def test_an_agent_outside_its_log_group_or_namespace_is_flagged(bad: Statement) -> None:
    assert iam_rules.agent_scope_problems([bad], AGENT_LOG_GROUP, AGENT_NAMESPACE)


def test_the_reader_finds_a_bad_statement_inside_fn_sub_text(template: dict[str, Any]) -> None:
    # A wildcard hidden in a JSON-text policy (as the tag-conditioned ones are) is still seen.
    bad = dict(template)
    bad["Resources"] = dict(template["Resources"]) | {
        "Sneaky": {
            "Type": "AWS::IAM::ManagedPolicy",
            "Properties": {
                "PolicyDocument": {
                    "Fn::Sub": '{"Statement": [{"Effect": "Allow", "Action": "ec2:*", '
                    '"Resource": "*"}]}'
                }
            },
        }
    }
    problems = iam_rules.wildcard_actions(_all(iam_rules.statements(bad)))
    assert problems == ["Sneaky/?: wildcard action 'ec2:*'"]


# ---- GCP -------------------------------------------------------------------------------------
def _gcp_dry_run(config: Path) -> list[Binding]:
    env = {"PATH": os.environ["PATH"], "DRY_RUN": "1", "PROJECT": "p"}
    # deploy.sh reads the config with Corral's loader: a valid one, and this interpreter.
    env |= {"CONFIG_FILE": str(config), "PYTHON": sys.executable}
    out = subprocess.run(
        ["bash", str(DEPLOY_SH)], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return iam_rules.bindings(out)


@pytest.fixture(scope="module")
def gcp_bindings() -> list[Binding]:
    return _gcp_dry_run(GCP_CONFIG)


# The seeds' two scenarios that need more than the fixed grants: an existing disk attached
# through base_config, and a shared VPC's subnetwork in its host project.
SEED_SCENARIOS = (
    GCP_CONFIG.read_text()
    + """\
      base_config:
        disks:
          - {mode: READ_ONLY, source: zones/us-central1-a/disks/data, autoDelete: false}
      network_interface:
        network: projects/host-123/global/networks/shared
        subnetwork: projects/host-123/regions/us-central1/subnetworks/agents
"""
)


def test_the_seed_scenarios_grants_keep_the_rules(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(SEED_SCENARIOS)

    found = _gcp_dry_run(config)

    extra = {(b.target, b.member, b.role) for b in found} - {
        (b.target, b.member, b.role) for b in _gcp_dry_run(GCP_CONFIG)
    }
    assert extra == {
        (
            "compute disks data",
            _sa("scale-up"),
            "projects/corral-test-123/roles/corralDiskReader",
        ),
        ("compute networks subnets agents", _sa("scale-up"), "roles/compute.networkUser"),
    }
    assert iam_rules.gcp_problems(found, AGENT_SA, "corral-agent") == []


AGENT_SA = "corral-agent@p.iam.gserviceaccount.com"


def _sa(name: str) -> str:
    return f"serviceAccount:corral-{name}@p.iam.gserviceaccount.com"


def test_the_dry_run_shows_every_binding(gcp_bindings: list[Binding]) -> None:
    roles = {(b.member, b.role) for b in gcp_bindings}
    assert (_sa("scale-up"), "roles/compute.instanceAdmin.v1") in roles
    assert (_sa("scale-up"), "roles/iam.serviceAccountUser") in roles
    assert (f"serviceAccount:{AGENT_SA}", "roles/logging.logWriter") in roles


def test_gcp_bindings_keep_the_rules(gcp_bindings: list[Binding]) -> None:
    assert iam_rules.gcp_problems(gcp_bindings, AGENT_SA, "corral-agent") == []


def test_the_api_function_has_no_compute_role(gcp_bindings: list[Binding]) -> None:
    assert not [b for b in gcp_bindings if b.member == _sa("api") and "compute" in b.role]


@pytest.mark.parametrize(
    "bad",
    [
        Binding("project p", _sa("schedule"), "roles/editor", None),
        Binding("project p", _sa("schedule"), "roles/compute.admin", None),
        Binding("project p", _sa("scale-up"), "roles/compute.instanceAdmin.v1", None),
        Binding("project p", _sa("scale-up"), "roles/compute.instanceAdmin.v1", "title=t"),
        Binding("project p", _sa("scale-up"), "roles/iam.serviceAccountUser", None),
        Binding("project host", _sa("scale-up"), "roles/compute.networkUser", None),
        Binding("project p", _sa("scale-up"), "projects/p/roles/corralDiskReader", None),
        Binding(
            "service-account x@p.iam.gserviceaccount.com",
            _sa("scale-up"),
            "roles/iam.serviceAccountUser",
            None,
        ),
        Binding("project p", f"serviceAccount:{AGENT_SA}", "roles/datastore.user", None),
        Binding(
            "topic corral-schedule", f"serviceAccount:{AGENT_SA}", "roles/pubsub.publisher", None
        ),
    ],
)
def test_a_bad_gcp_binding_is_flagged(bad: Binding) -> None:
    assert iam_rules.gcp_problems([bad], AGENT_SA, "corral-agent")


def test_the_binding_reader_parses_the_printed_commands() -> None:
    line = (
        "gcloud --project=p --quiet projects add-iam-policy-binding p "
        "--member=serviceAccount:a@p.iam.gserviceaccount.com --role=roles/x "
        "--condition=expression=resource.name.startsWith\\(\\'corral-agent-\\'\\),title=t"
    )
    (b,) = iam_rules.bindings(line + "\nsomething else\n")
    assert b == Binding(
        "project p",
        "serviceAccount:a@p.iam.gserviceaccount.com",
        "roles/x",
        "expression=resource.name.startsWith('corral-agent-'),title=t",
    )
