"""The IAM rules Corral's deployments must keep, as checks over parsed policies.

Each rule takes normalised statements (or GCP role bindings) and returns the problems it
finds, one readable line each; the tests feed it the real template and deploy script, and
deliberately bad policies to prove every rule can fail.

AWS: ``statements`` reads every identity and resource policy of a SAM/CloudFormation template,
including the JSON-text policies under ``Fn::Sub`` (their ``${...}`` placeholders kept as text,
so the ownership condition reads ``aws:RequestTag/${TagKey}: ${TagValue}``). GCP: ``bindings``
reads the ``add-iam-policy-binding`` commands that ``infra/gcp/deploy.sh`` prints with
``DRY_RUN=1``.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from corral.local.template import parse_template

# The ownership tag: the template's TagKey/TagValue parameters (every pool's tag_key/tag_value
# must equal them: corral.domain.config.aws), seen inside Fn::Sub text as placeholders.
OWNER_TAG_KEY = "${TagKey}"
OWNER_TAG_VALUE = "${TagValue}"
OWNER_CONDITION_KEY = re.compile(r"^(aws|ec2):(ResourceTag|RequestTag)/\$\{TagKey\}$")
# RunInstances also authorizes resources it only uses; those cannot carry a request tag.
USED_NOT_CREATED = {"image", "snapshot", "subnet", "security-group", "key-pair", "launch-template"}
READ_ONLY = re.compile(r"^ec2:(Describe|Get)[A-Za-z]*$")
# Tag writes are how a resource becomes "owned": allowed only as part of creating it.
TAG_WRITES = {"ec2:CreateTags", "ec2:DeleteTags"}


@dataclass(frozen=True)
class Statement:
    where: str  # "<resource>/<policy name or Sid>", for messages
    effect: str
    actions: tuple[str, ...]
    resources: tuple[Any, ...]
    condition: dict[str, Any]
    not_action: bool = False


# ---- reading a template ----------------------------------------------------------------------


def load_template(text: str) -> dict[str, Any]:
    return parse_template(text)


def _document(doc: Any) -> dict[str, Any]:
    """A policy document; JSON text under Fn::Sub is parsed, placeholders left as text."""
    if isinstance(doc, dict) and "Fn::Sub" in doc:
        text = doc["Fn::Sub"]
        return dict(json.loads(text if isinstance(text, str) else text[0]))
    return dict(doc)


def _branches(item: Any) -> Iterator[Any]:
    """A statement list entry; ``Fn::If`` yields both branches (either may be deployed)."""
    if isinstance(item, dict) and "Fn::If" in item:
        for branch in item["Fn::If"][1:]:
            if branch != {"Ref": "AWS::NoValue"}:
                yield from _branches(branch)
    else:
        yield item


def _listed(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, list) else (value,)


def _statements(where: str, doc: Any) -> Iterator[Statement]:
    for entry in _listed(_document(doc).get("Statement")):
        for s in _branches(entry):
            action_key = "NotAction" if "NotAction" in s else "Action"
            yield Statement(
                where=f"{where}/{s.get('Sid', '?')}",
                effect=s.get("Effect", "Allow"),
                actions=_listed(s.get(action_key)),
                resources=_listed(s.get("Resource", s.get("NotResource"))),
                condition=dict(s.get("Condition") or {}),
                not_action=action_key == "NotAction",
            )


def statements(template: dict[str, Any]) -> dict[str, list[Statement]]:
    """Every identity and resource policy statement, by the resource that holds it; a role's
    list includes the managed policies of this template that it attaches."""
    resources = template["Resources"]
    found: dict[str, list[Statement]] = {}
    for name, res in resources.items():
        props = res.get("Properties") or {}
        kind = res["Type"]
        if kind == "AWS::IAM::Role":
            out = [
                st
                for p in props.get("Policies", [])
                for st in _statements(f"{name}/{p['PolicyName']}", p["PolicyDocument"])
            ]
            for arn in props.get("ManagedPolicyArns", []):
                if isinstance(arn, dict) and "Ref" in arn and arn["Ref"] in resources:
                    managed = resources[arn["Ref"]]["Properties"]["PolicyDocument"]
                    out += _statements(f"{name}/{arn['Ref']}", managed)
            found[name] = out
        elif kind.endswith("Policy") and "PolicyDocument" in props:
            # IAM managed/inline policies and resource policies (SQS, SNS, S3 buckets...).
            found[name] = list(_statements(name, props["PolicyDocument"]))
    return found


# ---- AWS rules -------------------------------------------------------------------------------
def wildcard_actions(stmts: Iterable[Statement]) -> list[str]:
    """No ``*``, ``service:*`` or partial wildcard in an action, and no NotAction (an
    allow-everything-but)."""
    problems = []
    for s in stmts:
        if s.not_action:
            problems.append(f"{s.where}: NotAction grants every other action")
        for action in s.actions:
            if not isinstance(action, str) or "*" in action:
                problems.append(f"{s.where}: wildcard action {action!r}")
    return problems


def _owner_conditioned(condition: dict[str, Any]) -> bool:
    equals = condition.get("StringEquals") or {}
    return any(
        OWNER_CONDITION_KEY.match(key) and value == OWNER_TAG_VALUE for key, value in equals.items()
    )


def _kinds(resources: tuple[Any, ...]) -> set[str]:
    """The EC2 resource kinds of ARNs like ``arn:...:ec2:*:acct:instance/*``; '*' for any."""
    kinds = set()
    for arn in resources:
        if not isinstance(arn, str) or arn == "*":
            kinds.add("*")
        else:
            kinds.add(arn.rsplit(":", 1)[-1].split("/", 1)[0])
    return kinds


def untagged_ec2_mutations(stmts: Iterable[Statement]) -> list[str]:
    """Every EC2 action that changes something carries the ownership tag condition
    (``aws:RequestTag`` for what it creates, ``ec2:ResourceTag`` for what it acts on). The
    exceptions EC2 forces: read-only calls, and RunInstances on the resources it only uses.
    Tag writes must also be limited to creation (``ec2:CreateAction``), or the role could tag
    a foreign instance as Corral's and then terminate it."""
    problems = []
    for s in stmts:
        if s.effect != "Allow":
            continue
        for action in s.actions:
            if not isinstance(action, str) or not action.startswith("ec2:"):
                continue
            if READ_ONLY.match(action):
                continue
            if action == "ec2:RunInstances" and _kinds(s.resources) <= USED_NOT_CREATED:
                continue
            if not _owner_conditioned(s.condition):
                problems.append(f"{s.where}: {action} without the ownership tag condition")
            if action in TAG_WRITES and "ec2:CreateAction" not in (
                s.condition.get("StringEquals") or {}
            ):
                problems.append(f"{s.where}: {action} not limited to ec2:CreateAction")
    return problems


def pass_role_problems(stmts: Iterable[Statement], agent_role_arn: str) -> list[str]:
    """``iam:PassRole`` only on the agent role, only to EC2."""
    problems = []
    for s in stmts:
        if s.effect != "Allow" or not any(a in ("iam:PassRole", "iam:*") for a in s.actions):
            continue
        if s.resources != (agent_role_arn,):
            problems.append(f"{s.where}: iam:PassRole on {list(s.resources)}, not the agent role")
        passed_to = (s.condition.get("StringEquals") or {}).get("iam:PassedToService")
        if passed_to != "ec2.amazonaws.com":
            problems.append(f"{s.where}: iam:PassRole without iam:PassedToService=ec2")
    return problems


def agent_scope_problems(
    stmts: Iterable[Statement], log_group: Iterable[Any], namespace: Any
) -> list[str]:
    """The agent role: logs actions on its own log group (and its streams) only, and
    ``cloudwatch:PutMetricData`` only in its namespace (PutMetricData has no resource ARN:
    the ``cloudwatch:namespace`` condition is the only way to limit it)."""
    allowed_logs = list(log_group)
    problems = []
    for s in stmts:
        if s.effect != "Allow":
            continue
        for action in s.actions:
            if not isinstance(action, str):
                continue
            if action.startswith("logs:"):
                outside = [r for r in s.resources if r not in allowed_logs]
                if outside:
                    problems.append(f"{s.where}: {action} outside the agent log group: {outside}")
            elif action.startswith("cloudwatch:"):
                if action != "cloudwatch:PutMetricData":
                    problems.append(f"{s.where}: {action} (agents only put metrics)")
                equals = s.condition.get("StringEquals") or {}
                if equals.get("cloudwatch:namespace") != namespace:
                    problems.append(f"{s.where}: {action} not limited to the agent namespace")
    return problems


# ---- GCP: the role bindings deploy.sh makes ----------------------------------------------------
@dataclass(frozen=True)
class Binding:
    target: str  # "project p", "service-account corral-agent@...", "topic corral-schedule", ...
    member: str
    role: str
    condition: str | None  # None: unconditioned


_TARGETS = {
    ("projects",): "project",
    ("iam", "service-accounts"): "service-account",
    ("pubsub", "topics"): "topic",
    ("secrets",): "secret",
    ("run", "services"): "run-service",
    ("storage", "buckets"): "bucket",
}


def bindings(dry_run_output: str) -> list[Binding]:
    """The ``gcloud ... add-iam-policy-binding`` commands of a deploy.sh dry run."""
    found = []
    for line in dry_run_output.splitlines():
        words = shlex.split(line)
        if "add-iam-policy-binding" not in words:
            continue
        verb = words.index("add-iam-policy-binding")
        positional = [w for w in words[1:verb] if not w.startswith("--")]
        target = words[verb + 1]
        options = dict(w[2:].split("=", 1) for w in words[verb + 2 :] if "=" in w)
        kind = _TARGETS.get(tuple(positional), " ".join(positional))
        condition = options.get("condition")
        found.append(
            Binding(
                target=f"{kind} {target}",
                member=options["member"],
                role=options["role"],
                condition=None if condition in (None, "None") else condition,
            )
        )
    return found


BASIC_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}
NETWORK_USER = "roles/compute.networkUser"
DISK_ROLE = re.compile(r"^projects/[^/]+/roles/corralDisk(Reader|User)$")


def gcp_problems(
    found: Iterable[Binding], agent_sa: str, name_prefix: str, trial_sa: str | None = None
) -> list[str]:
    """GCP's versions of the AWS rules: no basic role (GCP's wildcard); Compute Engine roles
    only under a condition on Corral's instance/disk name prefix (IAM conditions cannot read
    labels); Service Account User (GCP's PassRole) only on the agent's account; the agent's
    account nothing beyond writing logs, invoking the API and minting the trial account's
    tokens; the trial account (default ``corral-trial@`` beside the agent's) nothing but
    objects of named buckets."""
    trial_sa = trial_sa or agent_sa.replace("corral-agent@", "corral-trial@", 1)
    trial_roles = {"roles/storage.objectAdmin", "roles/storage.objectViewer"}
    problems = []
    for b in found:
        where = f"{b.role} for {b.member} on {b.target}"
        if b.role in BASIC_ROLES or (b.role.endswith(".admin") and b.target.startswith("project")):
            problems.append(f"{where}: basic or admin role")
        prefixed = b.condition is not None and f"startsWith('{name_prefix}-')" in b.condition
        # A shared VPC's one subnetwork (the seed's Compute Network User) is scoped by itself.
        one_subnet = b.role == NETWORK_USER and b.target.startswith("compute networks subnets ")
        if b.role.startswith("roles/compute.") and not prefixed and not one_subnet:
            problems.append(f"{where}: not conditioned on the name prefix {name_prefix}-")
        # An existing disk a pool attaches: its custom role, on that one disk only.
        if DISK_ROLE.search(b.role) and not b.target.startswith("compute disks "):
            problems.append(f"{where}: a disk role beyond one disk")
        if b.role == "roles/iam.serviceAccountUser" and b.target != f"service-account {agent_sa}":
            problems.append(f"{where}: may act as accounts other than the agent's")
        if b.role == "roles/iam.serviceAccountTokenCreator" and (
            b.target != f"service-account {trial_sa}" or b.member != f"serviceAccount:{agent_sa}"
        ):
            problems.append(f"{where}: only the agent may mint tokens, of the trial account only")
        if b.member == f"serviceAccount:{agent_sa}":
            allowed = {
                ("roles/logging.logWriter", "project"),
                ("roles/run.invoker", "run-service"),
                ("roles/iam.serviceAccountTokenCreator", "service-account"),
            }
            if (b.role, b.target.split(" ")[0]) not in allowed:
                problems.append(f"{where}: the agent may only write logs and call the API")
        if b.member == f"serviceAccount:{trial_sa}" and (
            b.role not in trial_roles or not b.target.startswith("bucket gs://")
        ):
            problems.append(f"{where}: trials reach objects of named buckets only")
    return problems
