"""infra/template.yaml against the code it deploys: parsed, not deployed.

The tables must equal ``dynamo_schema.table_definitions`` (so they never drift), every queue
has a DLQ and a visibility timeout of at least six times its consumer's timeout, and the IAM
split is what the reviewers approved (the checks CI also runs: infra/check.sh).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.aws.dynamo_schema import table_definitions, ttl_specifications
from corral.local.template import parse_template

TEMPLATE = Path(__file__).resolve().parents[2] / "infra" / "template.yaml"
STACK_PREFIX = "${AWS::StackName}-"
HANDLERS = {
    "ApiFunction": "corral.handlers.aws.api.handler",
    "ScheduleFunction": "corral.handlers.aws.schedule.handler",
    "ScaleUpFunction": "corral.handlers.aws.scale_up.handler",
    "IdleReapFunction": "corral.handlers.aws.idle_reap.handler",
    "SpotReconcileFunction": "corral.handlers.aws.spot_reconcile.handler",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return parse_template(TEMPLATE.read_text())


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _sorted(items: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return sorted(items, key=lambda item: str(item[key]))


def test_tables_equal_the_schema_module(template: dict[str, Any]) -> None:
    # The stack's prefix is "<stack>-", so each TableName is !Sub "${AWS::StackName}-<kind>".
    expected = {d["TableName"]: d for d in table_definitions(STACK_PREFIX)}
    ttl = {s["TableName"]: s["TimeToLiveSpecification"] for s in ttl_specifications(STACK_PREFIX)}
    tables = _resources(template, "AWS::DynamoDB::Table")
    found = {t["Properties"]["TableName"]["Fn::Sub"]: t["Properties"] for t in tables.values()}

    assert sorted(found) == sorted(expected)
    for name, definition in expected.items():
        props = found[name]
        assert props["KeySchema"] == definition["KeySchema"], name
        assert _sorted(props["AttributeDefinitions"], "AttributeName") == _sorted(
            definition["AttributeDefinitions"], "AttributeName"
        ), name
        assert _sorted(props.get("GlobalSecondaryIndexes", []), "IndexName") == _sorted(
            definition.get("GlobalSecondaryIndexes", []), "IndexName"
        ), name
        assert "LocalSecondaryIndexes" not in props and "LocalSecondaryIndexes" not in definition
        assert props["BillingMode"] == definition["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props.get("TimeToLiveSpecification") == ttl.get(name), name


def _consumers(template: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Queue logical id -> (consuming function, its timeout)."""
    default_timeout = template["Globals"]["Function"]["Timeout"]
    found = {}
    for name, fn in _resources(template, "AWS::Serverless::Function").items():
        for event in fn["Properties"].get("Events", {}).values():
            if event["Type"] == "SQS":
                queue = event["Properties"]["Queue"]["Fn::GetAtt"][0]
                found[queue] = (name, fn["Properties"].get("Timeout", default_timeout))
    return found


def test_every_consumed_queue_waits_six_function_timeouts_and_has_a_dlq(
    template: dict[str, Any],
) -> None:
    queues = _resources(template, "AWS::SQS::Queue")
    consumers = _consumers(template)
    assert sorted(consumers) == ["InterruptionsQueue", "ScaleUpQueue", "ScheduleQueue"]
    for queue, (function, timeout) in consumers.items():
        props = queues[queue]["Properties"]
        assert props["VisibilityTimeout"] >= 6 * timeout, f"{queue} vs {function}"
        redrive = props["RedrivePolicy"]
        dlq = redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]
        assert dlq in queues and "RedrivePolicy" not in queues[dlq]["Properties"]
        assert 1 < redrive["maxReceiveCount"] <= 10
        # A FIFO queue's DLQ must be FIFO too.
        assert props.get("FifoQueue", False) == queues[dlq]["Properties"].get("FifoQueue", False)


def test_queue_kinds_match_what_sqs_queue_sends(template: dict[str, Any]) -> None:
    queues = _resources(template, "AWS::SQS::Queue")
    # scale-up messages carry per-message delays (launch backoff): FIFO cannot do that.
    assert not queues["ScaleUpQueue"]["Properties"].get("FifoQueue", False)
    # SqsQueue picks FIFO behaviour from the URL, i.e. the name must end in .fifo.
    schedule = queues["ScheduleQueue"]["Properties"]
    assert schedule["FifoQueue"] is True
    assert schedule["QueueName"]["Fn::Sub"].endswith(".fifo")


def test_queue_consumers_report_partial_batch_failures(template: dict[str, Any]) -> None:
    for fn in _resources(template, "AWS::Serverless::Function").values():
        for event in fn["Properties"].get("Events", {}).values():
            if event["Type"] == "SQS":
                assert event["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_functions_handlers_timers_and_log_groups(template: dict[str, Any]) -> None:
    functions = _resources(template, "AWS::Serverless::Function")
    assert {k: v["Properties"]["Handler"] for k, v in functions.items()} == HANDLERS
    schedules = {
        name: sorted(
            e["Properties"]["Schedule"]
            for e in fn["Properties"].get("Events", {}).values()
            if e["Type"] == "Schedule"
        )
        for name, fn in functions.items()
    }
    assert schedules["ScheduleFunction"] == ["rate(1 minute)"]
    assert schedules["IdleReapFunction"] == ["rate(1 minute)"]
    assert schedules["SpotReconcileFunction"] == ["rate(2 minutes)"]
    log_groups = _resources(template, "AWS::Logs::LogGroup")
    for name, fn in functions.items():
        group = fn["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert "RetentionInDays" in log_groups[group]["Properties"], name
    globals_ = template["Globals"]["Function"]
    assert (globals_["Runtime"], globals_["Architectures"]) == ("python3.12", ["arm64"])


def test_ec2_rules_feed_the_interruptions_queue(template: dict[str, Any]) -> None:
    rules = _resources(template, "AWS::Events::Rule")
    detail_types = set()
    for rule in rules.values():
        props = rule["Properties"]
        assert props["EventPattern"]["source"] == ["aws.ec2"]
        assert [t["Arn"]["Fn::GetAtt"][0] for t in props["Targets"]] == ["InterruptionsQueue"]
        detail_types.update(props["EventPattern"]["detail-type"])
    assert detail_types == {
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
    }
    (policy,) = _resources(template, "AWS::SQS::QueuePolicy").values()
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    sources = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
    assert sorted(s["Fn::GetAtt"][0] for s in sources) == sorted(rules)


# ---- IAM ----------------------------------------------------------------------------------


def _documents(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """Every policy document of a role (inline and the stack's managed ones), with the
    Fn::Sub JSON strings parsed (their ${...} placeholders left as text)."""
    resources = template["Resources"]
    props = resources[role]["Properties"]
    docs = [p["PolicyDocument"] for p in props.get("Policies", [])]
    docs += [
        resources[m["Ref"]]["Properties"]["PolicyDocument"] for m in props["ManagedPolicyArns"]
    ]
    parsed = []
    for doc in docs:
        text = doc.get("Fn::Sub")
        if text is None:
            parsed.append(doc)
        else:
            parsed.append(json.loads(text if isinstance(text, str) else text[0]))
    return parsed


def _ec2_grants(template: dict[str, Any], role: str) -> dict[str, list[dict[str, Any]]]:
    grants: dict[str, list[dict[str, Any]]] = {}
    for doc in _documents(template, role):
        for statement in doc["Statement"]:
            actions = statement["Action"]
            for action in [actions] if isinstance(actions, str) else actions:
                if isinstance(action, str) and re.match(r"^(ec2|iam):", action):
                    grants.setdefault(action, []).append(statement)
    return grants


# The seed's master permissions plus iam:PassRole, the warm pool's stop and start (the
# seed has no warm pool) and DescribeImages (the AMI's root device, where root_volume_size
# goes): the ceiling for every function (docs/aws.md lists the same).
WARM_POOL = {"ec2:StopInstances", "ec2:StartInstances"}
SEED_CEILING = {
    "ec2:DescribeImages",
    "ec2:CreateTags",
    "ec2:DescribeInstances",
    "ec2:RunInstances",
    "ec2:TerminateInstances",
    "ec2:RequestSpotInstances",
    "ec2:CancelSpotInstanceRequests",
    "ec2:DescribeSpotInstanceRequests",
    "iam:PassRole",
} | WARM_POOL
# What terminating needs: Ec2Provider.terminate describes by tag, cancels the spot requests
# behind spot instances, terminates; the services also cancel a record's open request.
# (Which EC2 calls each provider method makes: tests/infra/test_ec2_grants.py.)
TERMINATE = {
    "ec2:DescribeInstances",
    "ec2:DescribeSpotInstanceRequests",
    "ec2:TerminateInstances",
    "ec2:CancelSpotInstanceRequests",
}
EXPECTED_EC2 = {
    "ApiRole": TERMINATE,  # an agent registering with too few GPUs is terminated
    "ScheduleRole": {"ec2:DescribeSpotInstanceRequests", "ec2:CancelSpotInstanceRequests"},
    # launch (and the image's root device); a warm start (start), which gives the instance
    # up (terminate) when refused
    "ScaleUpRole": {"ec2:RunInstances", "ec2:CreateTags", "iam:PassRole", "ec2:StartInstances"}
    | {"ec2:DescribeImages"}
    | TERMINATE,
    "IdleReapRole": TERMINATE | {"ec2:StopInstances"},  # parks an empty agent
    "SpotReconcileRole": TERMINATE | {"ec2:StopInstances"},  # stops again what still runs
}


def test_one_role_per_function_with_only_its_ec2_actions(template: dict[str, Any]) -> None:
    functions = _resources(template, "AWS::Serverless::Function")
    roles = {fn["Properties"]["Role"]["Fn::GetAtt"][0] for fn in functions.values()}
    assert roles == set(EXPECTED_EC2)
    for role, expected in EXPECTED_EC2.items():
        grants = _ec2_grants(template, role)
        assert set(grants) == expected, role
        assert set(grants) <= SEED_CEILING


def test_mutating_ec2_actions_are_tag_conditioned(template: dict[str, Any]) -> None:
    for role in EXPECTED_EC2:
        for action, statements in _ec2_grants(template, role).items():
            for statement in statements:
                conditions = json.dumps(statement.get("Condition", {}))
                if action in ("ec2:TerminateInstances", "ec2:CancelSpotInstanceRequests"):
                    assert '"ec2:ResourceTag/${TagKey}": "${TagValue}"' in conditions, role
                elif action in WARM_POOL:
                    assert '"ec2:ResourceTag/${TagKey}": "${TagValue}"' in conditions, role
                    assert statement["Resource"].endswith(":instance/*"), role
                elif action == "ec2:CreateTags":
                    assert '"ec2:CreateAction": "RunInstances"' in conditions
                    assert '"aws:RequestTag/${TagKey}": "${TagValue}"' in conditions
                elif action == "iam:PassRole":
                    assert statement["Resource"] == "${AgentRoleArn}"
                    assert '"iam:PassedToService": "ec2.amazonaws.com"' in conditions
                elif action == "ec2:RunInstances" and "RequestTag" not in conditions:
                    # Only the resources a launch uses but does not create go untagged.
                    kinds = {r.rsplit(":", 1)[1].split("/")[0] for r in statement["Resource"]}
                    assert kinds <= {"image", "snapshot", "subnet", "security-group", "key-pair"}
                else:
                    assert action.startswith("ec2:Describe") or "RequestTag" in conditions


def test_agent_role_trusts_ec2_only_and_invokes_agent_routes_only(
    template: dict[str, Any],
) -> None:
    role = template["Resources"]["AgentRole"]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "ec2.amazonaws.com"}
    statements = role["Policies"][0]["PolicyDocument"]["Statement"]
    (invoke,) = [
        s for s in statements if isinstance(s, dict) and s.get("Action") == "execute-api:Invoke"
    ]
    assert invoke["Resource"]["Fn::Sub"].endswith("${HttpApi}/*/POST/agents/*")
