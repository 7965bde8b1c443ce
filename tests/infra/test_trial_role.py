"""The trial role of infra/template.yaml: what a trial's own credentials may do.

A trial gets a session of ``TrialRole`` (the agent assumes it per trial), never the instance
role: so the role must be trusted by the agent role alone, reach S3 only (the checkpoint
bucket and the data buckets the deployment names), and never the control plane's API or EC2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.infra import iam_rules

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "template.yaml"
AGENT_PRINCIPAL = {
    "Fn::If": [
        "MakeAgentRole",
        {"Fn::GetAtt": ["AgentRole", "Arn"]},
        {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/${AgentRoleName}"},
    ]
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return iam_rules.load_template(TEMPLATE.read_text())


def _resources(template: dict[str, Any]) -> dict[str, Any]:
    return dict(template["Resources"])


def test_the_trial_role_is_trusted_by_the_agent_role_only(template: dict[str, Any]) -> None:
    role = _resources(template)["TrialRole"]
    assert "Condition" not in role  # every deployment has it
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert {s["Effect"] for s in trust} == {"Allow"}
    assert [s["Principal"] for s in trust] == [{"AWS": AGENT_PRINCIPAL}] * 2
    by_action = {s["Action"]: s for s in trust}
    assert set(by_action) == {"sts:AssumeRole", "sts:TagSession"}
    # Sessions must be named after a trial (CloudTrail shows which trial did what).
    assert by_action["sts:AssumeRole"]["Condition"] == {
        "StringLike": {"sts:RoleSessionName": "trial-*"}
    }
    # Role chaining caps a session at an hour; the agent asks for exactly that.
    assert role["Properties"]["MaxSessionDuration"] == 3600


def test_the_trial_role_reaches_s3_only(template: dict[str, Any]) -> None:
    resources = _resources(template)
    props = resources["TrialRole"]["Properties"]
    assert "Policies" not in props and "ManagedPolicyArns" not in props
    # Every policy attached to the trial role, wherever it is declared.
    attached = [
        name
        for name, res in resources.items()
        if res["Type"] == "AWS::IAM::Policy"
        and {"Ref": "TrialRole"} in res["Properties"].get("Roles", [])
    ]
    assert attached == ["TrialAccessPolicy"]
    statements = iam_rules.statements(template)["TrialAccessPolicy"]
    actions = {a for s in statements for a in s.actions}
    assert actions == {
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListBucket",
    }
    assert not [a for a in actions if a.startswith(("execute-api:", "ec2:", "iam:", "sts:"))]
    assert all(s.effect == "Allow" and not s.not_action for s in statements)
    assert iam_rules.wildcard_actions(statements) == []


def test_the_checkpoint_bucket_moved_from_the_agent_role_to_the_trial_role(
    template: dict[str, Any],
) -> None:
    policies = iam_rules.statements(template)
    assert not [a for s in policies["AgentRole"] for a in s.actions if a.startswith("s3:")]
    checkpoint = {
        s.where.split("/")[-1]: s.resources
        for s in policies["TrialAccessPolicy"]
        if s.where.split("/")[-1].startswith("Checkpoint")
    }
    assert checkpoint == {
        "CheckpointObjects": ({"Fn::Sub": "arn:${AWS::Partition}:s3:::${CheckpointBucket}/*"},),
        "CheckpointListing": ({"Fn::Sub": "arn:${AWS::Partition}:s3:::${CheckpointBucket}"},),
    }


def test_the_agent_may_assume_the_trial_role_and_nothing_more(template: dict[str, Any]) -> None:
    policy = _resources(template)["AgentAssumesTrialRolePolicy"]["Properties"]
    assert policy["Roles"] == [
        {"Fn::If": ["MakeAgentRole", {"Ref": "AgentRole"}, {"Ref": "AgentRoleName"}]}
    ]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert statement["Resource"] == {"Fn::GetAtt": ["TrialRole", "Arn"]}


def test_the_template_outputs_the_trial_role_arn_and_the_api_tells_agents(
    template: dict[str, Any],
) -> None:
    arn = {"Fn::GetAtt": ["TrialRole", "Arn"]}
    assert template["Outputs"]["TrialRoleArn"]["Value"] == arn
    api = _resources(template)["ApiFunction"]["Properties"]["Environment"]["Variables"]
    assert api["CORRAL_TRIAL_ROLE_ARN"] == arn  # the register reply's trial_role_arn


# ---- the data buckets' ARNs, evaluated as CloudFormation would --------------------------------
def _evaluate(node: Any, refs: dict[str, Any], conditions: dict[str, bool]) -> Any:
    """The few intrinsics the ReadData statement uses: If, Split, Join, Sub, Ref."""
    if isinstance(node, list):
        return [_evaluate(n, refs, conditions) for n in node]
    if not isinstance(node, dict):
        return node
    ((fn, args),) = node.items()
    if fn == "Ref":
        return refs[args]
    if fn == "Fn::If":
        name, yes, no = args
        return _evaluate(yes if conditions[name] else no, refs, conditions)
    if fn == "Fn::Split":
        return _evaluate(args[1], refs, conditions).split(args[0])
    if fn == "Fn::Join":
        return args[0].join(_evaluate(args[1], refs, conditions))
    if fn == "Fn::Sub":
        text, variables = args
        values = {**refs, **{k: _evaluate(v, refs, conditions) for k, v in variables.items()}}
        for key, value in values.items():
            text = text.replace("${" + key + "}", str(value))
        return text
    raise AssertionError(f"unexpected intrinsic {fn}")


@pytest.mark.parametrize(
    ("partition", "china", "gov"),
    [("aws", False, False), ("aws-cn", True, False), ("aws-us-gov", False, True)],
)
def test_each_data_bucket_and_its_objects_are_readable(
    template: dict[str, Any], partition: str, china: bool, gov: bool
) -> None:
    (read,) = [
        s
        for s in _resources(template)["TrialAccessPolicy"]["Properties"]["PolicyDocument"][
            "Statement"
        ]
        if s["Fn::If"][0] == "HasTrialDataBuckets"
    ]
    statement = read["Fn::If"][1]
    assert statement["Action"] == ["s3:GetObject", "s3:ListBucket"]
    resources = _evaluate(
        statement["Resource"],
        {"TrialDataBuckets": ["datasets", "corpus-eu"], "AWS::Partition": partition},
        {"InChina": china, "InGovCloud": gov},
    )
    p = partition
    assert resources == [
        f"arn:{p}:s3:::datasets",
        f"arn:{p}:s3:::corpus-eu",
        f"arn:{p}:s3:::datasets/*",
        f"arn:{p}:s3:::corpus-eu/*",
    ]


# ---- GCP: the trial service account of infra/gcp/deploy.sh ------------------------------------
GCP_AGENT = "serviceAccount:corral-agent@p.iam.gserviceaccount.com"
GCP_TRIAL = "serviceAccount:corral-trial@p.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def gcp_bindings() -> list[iam_rules.Binding]:
    env = {
        "PATH": os.environ["PATH"],
        "DRY_RUN": "1",
        "PROJECT": "p",
        # deploy.sh reads a valid config with Corral's own loader, run by PYTHON.
        "CONFIG_FILE": str(ROOT / "tests" / "fixtures" / "gcp" / "cluster.yaml"),
        "PYTHON": sys.executable,
        "CHECKPOINT_BUCKET": "ckpt",
        "TRIAL_DATA_BUCKETS": "data-a,data-b",
    }
    out = subprocess.run(
        ["bash", str(ROOT / "infra" / "gcp" / "deploy.sh")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "service-accounts create corral-trial" in out
    return iam_rules.bindings(out)


def test_gcp_trials_get_an_account_of_their_own(gcp_bindings: list[iam_rules.Binding]) -> None:
    trial = {(b.target, b.role) for b in gcp_bindings if b.member == GCP_TRIAL}
    assert trial == {
        ("bucket gs://ckpt", "roles/storage.objectAdmin"),
        ("bucket gs://data-a", "roles/storage.objectViewer"),
        ("bucket gs://data-b", "roles/storage.objectViewer"),
    }
    minting = [b for b in gcp_bindings if b.role == "roles/iam.serviceAccountTokenCreator"]
    assert [(b.target, b.member) for b in minting] == [
        ("service-account corral-trial@p.iam.gserviceaccount.com", GCP_AGENT)
    ]
    assert iam_rules.gcp_problems(gcp_bindings, GCP_AGENT.split(":")[1], "corral-agent") == []


@pytest.mark.parametrize(
    "bad",
    [
        # The agent minting its own tokens, or a function minting the trial's.
        iam_rules.Binding(
            "service-account corral-agent@p.iam.gserviceaccount.com",
            GCP_AGENT,
            "roles/iam.serviceAccountTokenCreator",
            None,
        ),
        iam_rules.Binding(
            "service-account corral-trial@p.iam.gserviceaccount.com",
            "serviceAccount:corral-api@p.iam.gserviceaccount.com",
            "roles/iam.serviceAccountTokenCreator",
            None,
        ),
        # The trial account beyond bucket objects.
        iam_rules.Binding("project p", GCP_TRIAL, "roles/storage.objectAdmin", None),
        iam_rules.Binding("bucket gs://ckpt", GCP_TRIAL, "roles/storage.admin", None),
        iam_rules.Binding("run-service corral-api", GCP_TRIAL, "roles/run.invoker", None),
    ],
)
def test_a_bad_trial_binding_is_flagged(bad: iam_rules.Binding) -> None:
    assert iam_rules.gcp_problems([bad], GCP_AGENT.split(":")[1], "corral-agent")
