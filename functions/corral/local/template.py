"""Reading ``infra/template.yaml`` for the local stack: the one source of truth for tables,
queues, rules, timers and which handler consumes what.

A direct reading of the few resource types we emulate, not a CloudFormation engine: a YAML
loader that keeps the short intrinsic tags (``!Ref``, ``!GetAtt``, ``!Sub`` ...) as their
long forms, and a resolver for the intrinsics those resources use. Anything it cannot
resolve becomes ``None`` and is reported, so a template change shows up as a clear warning
instead of a half-built stack.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# Rates the local stack can drive; cron() schedules are reported and skipped.
_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}
_SUB_VAR = re.compile(r"\$\{([^}!][^}]*)\}")


class CfnLoader(yaml.SafeLoader):
    """SafeLoader plus CloudFormation's short tags, kept as their long forms."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":  # !GetAtt Res.Attr
            value = str(value).split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {name: value}


CfnLoader.add_multi_constructor("!", _intrinsic)


def parse_template(text: str) -> dict[str, Any]:
    """A CloudFormation template's document, intrinsics in their long forms (``!Ref x`` is
    ``{"Ref": "x"}``, ``!GetAtt A.B`` is ``{"Fn::GetAtt": ["A", "B"]}``)."""
    data = yaml.load(text, Loader=CfnLoader)  # a SafeLoader subclass
    return dict(data) if isinstance(data, dict) else {}


def load_template(path: Path) -> dict[str, Any]:
    """The template at ``path``; OSError if it cannot be read, ValueError (one line, naming
    the file) if it is not YAML or not a template."""
    try:
        data = parse_template(path.read_text())
    except yaml.MarkedYAMLError as exc:
        # One line (the YAML error's own text spans several, with the offending source).
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValueError(
            f"{path}: invalid YAML{where}: {exc.problem or exc.context or 'syntax error'}"
        ) from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("Resources"), dict):
        raise ValueError(f"{path}: not a CloudFormation template (no Resources)")
    return data


def rate_seconds(expression: str) -> float | None:
    match = _RATE.match(expression.strip())
    if not match:
        return None
    unit = match.group(2).rstrip("s")
    return float(int(match.group(1)) * _UNIT_S[unit])


@dataclass
class Resolver:
    """Resolves intrinsics against what the local stack created.

    ``refs``: logical id -> what ``Ref`` returns (table name, queue URL, ...);
    ``attrs``: (logical id, attribute) -> value (``Arn``, ``QueueName``, ``StreamArn`` ...).
    """

    region: str
    account: str
    stack_name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    refs: dict[str, Any] = field(default_factory=dict)
    attrs: dict[tuple[str, str], Any] = field(default_factory=dict)
    conditions: dict[str, Any] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)

    def pseudo(self) -> dict[str, Any]:
        return {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::StackName": self.stack_name,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": None,
        }

    def ref(self, name: str) -> Any:
        for table in (self.pseudo(), self.parameters, self.refs):
            if name in table:
                return table[name]
        self.unresolved.append(f"Ref {name}")
        return None

    def get_att(self, logical_id: str, attribute: str) -> Any:
        if (logical_id, attribute) in self.attrs:
            return self.attrs[(logical_id, attribute)]
        self.unresolved.append(f"GetAtt {logical_id}.{attribute}")
        return None

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            handler = self._functions().get(key)
            if handler is not None:
                return handler(arg)
        return {k: self.resolve(v) for k, v in value.items()}

    def _functions(self) -> dict[str, Callable[[Any], Any]]:
        return {
            "Ref": lambda a: self.ref(str(a)),
            "Fn::GetAtt": lambda a: self.get_att(*(a if isinstance(a, list) else a.split(".", 1))),
            "Fn::Sub": self._sub,
            "Fn::Join": lambda a: str(a[0]).join(str(self.resolve(x)) for x in a[1]),
            "Fn::Select": lambda a: self.resolve(a[1])[int(self.resolve(a[0]))],
            "Fn::Split": lambda a: str(self.resolve(a[1])).split(str(a[0])),
            "Fn::If": self._if,
            "Fn::Equals": lambda a: self.resolve(a[0]) == self.resolve(a[1]),
            "Fn::Not": lambda a: not self._truth(a[0]),
            "Fn::And": lambda a: all(self._truth(x) for x in a),
            "Fn::Or": lambda a: any(self._truth(x) for x in a),
            "Condition": lambda a: self._truth({"Condition": a}),
            "Fn::ImportValue": lambda a: self.unresolved.append(f"ImportValue {a}"),
        }

    def _truth(self, value: Any) -> bool:
        if isinstance(value, dict) and set(value) == {"Condition"}:
            return bool(self.resolve(self.conditions.get(str(value["Condition"]), False)))
        return bool(self.resolve(value))

    def _if(self, arg: list[Any]) -> Any:
        name, yes, no = arg
        return self.resolve(yes if self._truth({"Condition": name}) else no)

    def _sub(self, arg: Any) -> Any:
        text, local = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
        values = {k: self.resolve(v) for k, v in local.items()}

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in values:
                return str(values[name])
            if "." in name and not name.startswith("AWS::"):
                found = self.get_att(*name.split(".", 1))
            else:
                found = self.ref(name)
            return "" if found is None else str(found)

        return _SUB_VAR.sub(one, text).replace("${!", "${")


def parameter_defaults(template: Mapping[str, Any]) -> dict[str, Any]:
    params = template.get("Parameters") or {}
    return {name: spec.get("Default") for name, spec in params.items() if isinstance(spec, dict)}


def resources_of(template: Mapping[str, Any], *types: str) -> dict[str, dict[str, Any]]:
    """Logical id -> resource, for the given types, in template order."""
    return {
        name: res
        for name, res in template["Resources"].items()
        if isinstance(res, dict) and res.get("Type") in types
    }


def function_globals(template: Mapping[str, Any]) -> dict[str, Any]:
    return dict((template.get("Globals") or {}).get("Function") or {})
