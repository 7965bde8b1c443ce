"""Create the template's tables, queues and EventBridge rules in moto, and say which handler
each queue, timer and HTTP API feeds.

Physical names follow CloudFormation: the name the template gives, else ``<stack>-<LogicalId>``.
Three moto gaps are bridged here (see docs/TOOLING): schedules never fire and a schedule-only
rule wrongly matches every event, so schedule rules become local timers and are never created
in moto; a rule targeting a Lambda crashes ``put_events``, so such a rule targets a local
"shadow" queue whose messages the pollers hand to that function; and what moto's rules put on
a queue lacks envelope fields AWS always sends (``account``), so every queue a rule feeds is
marked ``eventbridge`` and its poller completes the events (``eventbridge.py``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from corral.local.template import (
    Resolver,
    function_globals,
    load_template,
    parameter_defaults,
    rate_seconds,
    resources_of,
)

log = logging.getLogger(__name__)

_TABLE_KEYS = (
    "KeySchema",
    "AttributeDefinitions",
    "BillingMode",
    "ProvisionedThroughput",
    "GlobalSecondaryIndexes",
    "LocalSecondaryIndexes",
)
_QUEUE_ATTRS = (
    "VisibilityTimeout",
    "MessageRetentionPeriod",
    "DelaySeconds",
    "MaximumMessageSize",
    "ReceiveMessageWaitTimeSeconds",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
)


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    handler: str  # "corral.handlers.aws.api.handler"
    environment: dict[str, str]
    timeout_s: float


@dataclass(frozen=True)
class QueueSource:
    """An SQS event source mapping (or a shadow queue fed by a rule, ``raw_events``)."""

    function: FunctionSpec
    queue_url: str
    queue_arn: str
    batch_size: int = 10
    report_failures: bool = False
    raw_events: bool = False  # deliver each body as the event itself (EventBridge -> Lambda)
    eventbridge: bool = False  # a rule feeds it: complete the events moto delivers


@dataclass(frozen=True)
class TimerSource:
    function: FunctionSpec
    name: str
    rate_s: float
    rule_arn: str


@dataclass
class LocalResources:
    region: str
    functions: dict[str, FunctionSpec] = field(default_factory=dict)
    queues: list[QueueSource] = field(default_factory=list)
    timers: list[TimerSource] = field(default_factory=list)
    http: FunctionSpec | None = None
    http_route: str = "$default"  # "ANY /{proxy+}" for a proxy route, as API Gateway names it
    queue_urls: dict[str, str] = field(default_factory=dict)  # logical id -> URL
    rule_targets: set[str] = field(default_factory=set)  # ARNs of queues rules send to
    tables: dict[str, str] = field(default_factory=dict)  # logical id -> name
    warnings: list[str] = field(default_factory=list)

    def environment(self) -> dict[str, str]:
        """The union of the functions' variables (one process runs them all)."""
        merged: dict[str, str] = {}
        for spec in self.functions.values():
            for key, value in spec.environment.items():
                if key in merged and merged[key] != value:
                    self.warnings.append(f"env {key} differs between functions; using {value!r}")
                merged[key] = value
        return merged


def create_from_template(
    template_path: Path, session: Any, *, stack_name: str = "corral-local"
) -> LocalResources:
    """``session``: a boto3 Session pointed at moto."""
    template = load_template(template_path)
    region = session.region_name or "us-east-1"
    account = session.client("sts").get_caller_identity()["Account"]
    r = Resolver(region, account, stack_name, parameters=parameter_defaults(template))
    r.conditions = dict(template.get("Conditions") or {})
    # Resources we do not emulate (roles, log groups, SSM parameters ...) still resolve, to
    # placeholder names, so only references to missing resources are reported.
    for logical_id in template["Resources"]:
        r.refs[logical_id] = f"{stack_name}-{logical_id}"
        r.attrs[(logical_id, "Arn")] = f"arn:aws:local:{region}:{account}:{logical_id}"
    out = LocalResources(region)
    _create_tables(template, session.client("dynamodb"), r, out)
    _create_queues(template, session.client("sqs"), r, out)
    r.refs.setdefault("ServerlessHttpApi", f"{stack_name}-ServerlessHttpApi")
    _read_functions(template, r, out)
    events = session.client("events")
    _create_rules(template, events, session.client("sqs"), r, out)
    _read_function_events(template, events, session.client("sqs"), r, out)
    out.queues = [
        replace(q, eventbridge=True) if q.raw_events or q.queue_arn in out.rule_targets else q
        for q in out.queues
    ]
    out.warnings.extend(f"unresolved {what}" for what in dict.fromkeys(r.unresolved))
    return out


def _name(r: Resolver, logical_id: str, given: Any) -> str:
    return str(r.resolve(given)) if given else f"{r.stack_name}-{logical_id}"


def _create_tables(template: dict[str, Any], ddb: Any, r: Resolver, out: LocalResources) -> None:
    for logical_id, res in resources_of(
        template, "AWS::DynamoDB::Table", "AWS::Serverless::SimpleTable"
    ).items():
        props = r.resolve(res.get("Properties") or {})
        name = _name(r, logical_id, props.get("TableName"))
        if res["Type"] == "AWS::Serverless::SimpleTable":
            key = props.get("PrimaryKey") or {"Name": "id", "Type": "String"}
            kind = {"String": "S", "Number": "N", "Binary": "B"}[key.get("Type", "String")]
            args: dict[str, Any] = {
                "KeySchema": [{"AttributeName": key["Name"], "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": key["Name"], "AttributeType": kind}],
                "BillingMode": "PAY_PER_REQUEST",
            }
        else:
            args = {k: props[k] for k in _TABLE_KEYS if props.get(k) is not None}
            args.setdefault("BillingMode", "PAY_PER_REQUEST")
            stream = props.get("StreamSpecification")
            if stream:
                args["StreamSpecification"] = {"StreamEnabled": True, **stream}
        desc = ddb.create_table(TableName=name, **args)["TableDescription"]
        ttl = props.get("TimeToLiveSpecification")
        if ttl and ttl.get("Enabled"):
            # Kept for fidelity only: moto's TTL never deletes (nor may our code rely on it).
            ddb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
        r.refs[logical_id] = name
        r.attrs[(logical_id, "Arn")] = desc["TableArn"]
        if desc.get("LatestStreamArn"):
            r.attrs[(logical_id, "StreamArn")] = desc["LatestStreamArn"]
        out.tables[logical_id] = name


def _create_queues(template: dict[str, Any], sqs: Any, r: Resolver, out: LocalResources) -> None:
    pending = dict(resources_of(template, "AWS::SQS::Queue"))
    # Dead-letter queues first: a redrive policy names its DLQ's ARN.
    while pending:
        progressed = False
        for logical_id, res in list(pending.items()):
            raw = res.get("Properties") or {}
            dlq = (raw.get("RedrivePolicy") or {}).get("deadLetterTargetArn")
            if isinstance(dlq, dict) and _target_id(dlq) in pending:
                continue
            _create_queue(sqs, r, out, logical_id, r.resolve(raw))
            del pending[logical_id]
            progressed = True
        if not progressed:
            raise ValueError(f"queue redrive policies form a cycle: {sorted(pending)}")


def _target_id(value: dict[str, Any]) -> str | None:
    if "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        return str(target[0] if isinstance(target, list) else target.split(".")[0])
    return str(value["Ref"]) if "Ref" in value else None


def _create_queue(
    sqs: Any, r: Resolver, out: LocalResources, logical_id: str, props: dict[str, Any]
) -> None:
    name = _name(r, logical_id, props.get("QueueName"))
    if props.get("FifoQueue") and not name.endswith(".fifo"):
        name += ".fifo"
    attrs = {k: _attr(props[k]) for k in _QUEUE_ATTRS if props.get(k) is not None}
    if props.get("RedrivePolicy"):
        attrs["RedrivePolicy"] = json.dumps(props["RedrivePolicy"])
    url = sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
    arn = f"arn:aws:sqs:{r.region}:{r.account}:{name}"
    r.refs[logical_id] = url
    r.attrs.update({(logical_id, "Arn"): arn, (logical_id, "QueueName"): name})
    r.attrs[(logical_id, "QueueUrl")] = url
    out.queue_urls[logical_id] = url


def _attr(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _read_functions(template: dict[str, Any], r: Resolver, out: LocalResources) -> None:
    glob = function_globals(template)
    glob_env = ((glob.get("Environment") or {}).get("Variables")) or {}
    for logical_id, res in resources_of(
        template, "AWS::Serverless::Function", "AWS::Lambda::Function"
    ).items():
        props = res.get("Properties") or {}
        handler = props.get("Handler") or glob.get("Handler")
        if not handler:
            out.warnings.append(f"{logical_id}: no Handler, skipped")
            continue
        raw_env = {**glob_env, **(((props.get("Environment") or {}).get("Variables")) or {})}
        env = {k: v for k, v in r.resolve(raw_env).items() if v is not None}
        spec = FunctionSpec(
            logical_id,
            str(handler),
            {k: _attr(v) for k, v in env.items()},
            float(props.get("Timeout") or glob.get("Timeout") or 3),
        )
        out.functions[logical_id] = spec
        r.refs[logical_id] = logical_id
        r.attrs[(logical_id, "Arn")] = (
            f"arn:aws:lambda:{r.region}:{r.account}:function:{r.stack_name}-{logical_id}"
        )


def _function_by_arn(r: Resolver, out: LocalResources, arn: Any) -> FunctionSpec | None:
    for logical_id, spec in out.functions.items():
        if r.attrs.get((logical_id, "Arn")) == arn:
            return spec
    return None


def _shadow_queue(sqs: Any, r: Resolver, name: str) -> tuple[str, str]:
    queue = f"{r.stack_name}-{name}-shadow"[:80]
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    return url, f"arn:aws:sqs:{r.region}:{r.account}:{queue}"


def _route_pattern(
    events: Any,
    sqs: Any,
    r: Resolver,
    out: LocalResources,
    rule: str,
    pattern: Any,
    bus: str | None,
    targets: list[tuple[str, Any]],
) -> None:
    """Create the rule in moto with SQS targets; Lambda targets go through a shadow queue."""
    events.put_rule(
        Name=rule,
        EventPattern=json.dumps(pattern),
        State="ENABLED",
        **({"EventBusName": bus} if bus else {}),
    )
    sqs_targets = []
    for target_id, arn in targets:
        spec = _function_by_arn(r, out, arn)
        if spec is None:
            sqs_targets.append({"Id": target_id, "Arn": str(arn)})
            out.rule_targets.add(str(arn))
            continue
        url, shadow_arn = _shadow_queue(sqs, r, f"{rule}-{target_id}")
        sqs_targets.append({"Id": target_id, "Arn": shadow_arn})
        out.rule_targets.add(shadow_arn)
        out.queues.append(
            QueueSource(spec, url, shadow_arn, batch_size=1, raw_events=True, eventbridge=True)
        )
    if sqs_targets:
        events.put_targets(Rule=rule, Targets=sqs_targets, **({"EventBusName": bus} if bus else {}))


def _add_timer(
    r: Resolver, out: LocalResources, spec: FunctionSpec | None, name: str, expr: Any
) -> None:
    rate = rate_seconds(str(expr))
    if spec is None or rate is None:
        out.warnings.append(f"{name}: schedule {expr!r} not driven locally")
        return
    arn = f"arn:aws:events:{r.region}:{r.account}:rule/{name}"
    out.timers.append(TimerSource(spec, name, rate, arn))


def _create_rules(
    template: dict[str, Any], events: Any, sqs: Any, r: Resolver, out: LocalResources
) -> None:
    for logical_id, res in resources_of(template, "AWS::Events::Rule").items():
        props = r.resolve(res.get("Properties") or {})
        if props.get("State", "ENABLED") != "ENABLED":
            continue
        name = _name(r, logical_id, props.get("Name"))
        targets = [(str(t.get("Id")), t.get("Arn")) for t in props.get("Targets") or []]
        r.refs[logical_id] = name
        r.attrs[(logical_id, "Arn")] = f"arn:aws:events:{r.region}:{r.account}:rule/{name}"
        if props.get("ScheduleExpression"):
            for _, arn in targets:
                _add_timer(r, out, _function_by_arn(r, out, arn), name, props["ScheduleExpression"])
            continue
        if props.get("EventPattern"):
            _route_pattern(
                events,
                sqs,
                r,
                out,
                name,
                props["EventPattern"],
                props.get("EventBusName"),
                targets,
            )


def _read_function_events(
    template: dict[str, Any], events: Any, sqs: Any, r: Resolver, out: LocalResources
) -> None:
    for logical_id, res in resources_of(template, "AWS::Serverless::Function").items():
        spec = out.functions.get(logical_id)
        if spec is None:
            continue
        for event_name, event in ((res.get("Properties") or {}).get("Events") or {}).items():
            kind = event.get("Type")
            props = r.resolve(event.get("Properties") or {})
            if props.get("Enabled") is False:
                continue
            if kind == "SQS":
                arn = str(props.get("Queue"))
                url = next(
                    (u for q, u in out.queue_urls.items() if r.attrs.get((q, "Arn")) == arn), None
                )
                if url is None:
                    out.warnings.append(f"{logical_id}.{event_name}: unknown queue {arn}")
                    continue
                failures = "ReportBatchItemFailures" in (props.get("FunctionResponseTypes") or [])
                batch = int(props.get("BatchSize") or 10)
                out.queues.append(QueueSource(spec, url, arn, batch, failures))
            elif kind in ("Schedule", "ScheduleV2"):
                expr = props.get("Schedule") or props.get("ScheduleExpression")
                _add_timer(r, out, spec, f"{r.stack_name}-{logical_id}-{event_name}", expr)
            elif kind in ("EventBridgeRule", "CloudWatchEvent"):
                rule = f"{r.stack_name}-{logical_id}-{event_name}"
                _route_pattern(
                    events,
                    sqs,
                    r,
                    out,
                    rule,
                    props.get("Pattern"),
                    props.get("EventBusName"),
                    [(event_name, r.attrs[(logical_id, "Arn")])],
                )
            elif kind == "HttpApi":
                out.http = spec
                path, method = props.get("Path"), str(props.get("Method") or "ANY").upper()
                if path:
                    any_method = method in ("ANY", "X-AMAZON-APIGATEWAY-ANY-METHOD")
                    out.http_route = f"{'ANY' if any_method else method} {path}"
