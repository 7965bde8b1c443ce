"""The agents' network: infra/network.yaml (AWS security group) and infra/gcp/firewall.sh
(GCE firewall rules) open exactly the ports the seeds list, between agents, and nothing to
the world inbound. cfn-lint runs on network.yaml in infra/check.sh."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from corral.local.template import parse_template

ROOT = Path(__file__).resolve().parents[2]
NETWORK = ROOT / "infra" / "network.yaml"
FIREWALL = ROOT / "infra" / "gcp" / "firewall.sh"
# The seeds' fixed ports between agents (000/002: "Set up Internet Access").
FIXED_PORTS = {(1734, 1734), (1750, 1750), (12350, 12350), (12355, 12355), (2600, 2900)}
ANY_EPHEMERAL = (1024, 65535)  # gloo_port_range / nccl_port_range unset in Determined
WORLD = {"0.0.0.0/0", "::/0"}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return parse_template(NETWORK.read_text())


def _resolve(value: Any, params: dict[str, Any]) -> Any:
    if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in params:
        return params[value["Ref"]]
    return value


def _defaults(template: dict[str, Any]) -> dict[str, Any]:
    return {k: p.get("Default") for k, p in template["Parameters"].items()}


def _self_rules(template: dict[str, Any], kind: str, peer_key: str) -> dict[str, tuple[int, int]]:
    """{resource: (from, to)} of the group's rules whose peer is the group itself, with the
    parameters at their defaults."""
    params = _defaults(template)
    rules = {}
    for name, res in template["Resources"].items():
        if res["Type"] != kind:
            continue
        props = res["Properties"]
        assert props["GroupId"] == {"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}
        if props.get(peer_key) == {"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}:
            assert props["IpProtocol"] == "tcp", name
            rules[name] = (
                int(_resolve(props["FromPort"], params)),
                int(_resolve(props["ToPort"], params)),
            )
    return rules


@pytest.mark.parametrize(
    ("kind", "peer_key"),
    [
        ("AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"),
        ("AWS::EC2::SecurityGroupEgress", "DestinationSecurityGroupId"),
    ],
)
def test_every_seed_port_is_open_between_agents_both_ways(
    template: dict[str, Any], kind: str, peer_key: str
) -> None:
    ranges = set(_self_rules(template, kind, peer_key).values())
    assert ranges >= FIXED_PORTS
    assert ANY_EPHEMERAL in ranges  # GLOO and NCCL at Determined's default
    assert ranges == {*FIXED_PORTS, ANY_EPHEMERAL}  # and nothing else


def test_gloo_and_nccl_ranges_are_parameters_and_nccl_rule_only_when_it_differs(
    template: dict[str, Any],
) -> None:
    res = template["Resources"]
    assert res["GlooRangeIngress"]["Properties"]["FromPort"] == {"Ref": "GlooPortRangeStart"}
    assert res["GlooRangeIngress"]["Properties"]["ToPort"] == {"Ref": "GlooPortRangeEnd"}
    for name in ("NcclRangeIngress", "NcclRangeEgress"):
        assert res[name]["Condition"] == "NcclRangeDiffers"
        assert res[name]["Properties"]["FromPort"] == {"Ref": "NcclPortRangeStart"}
    params = template["Parameters"]
    for prefix in ("Gloo", "Nccl"):
        assert params[f"{prefix}PortRangeStart"]["Default"] == ANY_EPHEMERAL[0]
        assert params[f"{prefix}PortRangeEnd"]["Default"] == ANY_EPHEMERAL[1]


def test_nothing_is_open_to_the_world_inbound(template: dict[str, Any]) -> None:
    params = _defaults(template)
    group = template["Resources"]["AgentSecurityGroup"]["Properties"]
    assert "SecurityGroupIngress" not in group
    for name, res in template["Resources"].items():
        if res["Type"] != "AWS::EC2::SecurityGroupIngress":
            continue
        props = res["Properties"]
        assert "CidrIpv6" not in props, name
        if "CidrIp" in props:
            # Only the optional TensorBoard rule takes a CIDR, from an empty-by-default
            # parameter that a rule forbids setting to 0.0.0.0/0.
            assert props["CidrIp"] == {"Ref": "TensorBoardCidr"}, name
            assert res["Condition"] == "HasTensorBoardCidr"
            assert params["TensorBoardCidr"] == ""
    assert "0.0.0.0/0" in str(template["Rules"]["TensorBoardNotWorldOpen"])


def test_egress_reaches_the_api_over_https_only(template: dict[str, Any]) -> None:
    egress = template["Resources"]["AgentSecurityGroup"]["Properties"]["SecurityGroupEgress"]
    https = egress[0]
    assert (https["IpProtocol"], https["FromPort"], https["ToPort"]) == ("tcp", 443, 443)
    assert https["CidrIp"] == {"Ref": "ApiEgressCidr"}
    # HTTP only when asked for.
    assert egress[1]["Fn::If"][0] == "HttpEgress"
    assert _defaults(template)["AllowHttpEgress"] == "false"


# ---- GCP ------------------------------------------------------------------------------------
def _dry_run(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_PORT_RANGE")}
    return subprocess.run(
        ["bash", str(FIREWALL), "--dry-run"],
        capture_output=True,
        text=True,
        env={**clean, "PROJECT": "p", **env},
        timeout=30,
        check=False,
    )


def _rules(stdout: str) -> dict[str, dict[str, str]]:
    """{rule name: {flag: value}} from the printed gcloud commands."""
    found = {}
    for line in stdout.splitlines():
        words = shlex.split(line)
        assert words[:5] == ["gcloud", "--project=p", "--quiet", "compute", "firewall-rules"]
        assert words[5] == "create"
        flags = dict(w[2:].split("=", 1) for w in words[7:])
        found[words[6]] = flags
    return found


def test_gcp_dry_run_lists_the_rules_between_tagged_agents() -> None:
    done = _dry_run()
    assert done.returncode == 0, done.stderr
    rules = _rules(done.stdout)
    assert list(rules) == ["corral-agents-between"]
    rule = rules["corral-agents-between"]
    assert rule["direction"] == "INGRESS"
    assert rule["source-tags"] == rule["target-tags"] == "corral-agent"
    assert "source-ranges" not in rule
    assert rule["rules"].split(",") == [
        "tcp:1734",
        "tcp:1750",
        "tcp:12350",
        "tcp:12355",
        "tcp:2600-2900",
        "tcp:1024-65535",
    ]


def test_gcp_ranges_from_determined_form_and_optional_tensorboard_cidr() -> None:
    done = _dry_run(
        GLOO_PORT_RANGE="30000:30100",
        NCCL_PORT_RANGE="40000-40100",
        TENSORBOARD_SOURCE_RANGES="10.8.0.0/16",
        AGENT_TAG="gpu-agents",
    )
    assert done.returncode == 0, done.stderr
    rules = _rules(done.stdout)
    between = rules["corral-agents-between"]["rules"].split(",")
    assert between[-2:] == ["tcp:30000-30100", "tcp:40000-40100"]
    board = rules["corral-agents-tensorboard"]
    assert board["source-ranges"] == "10.8.0.0/16"
    assert board["target-tags"] == "gpu-agents"
    assert board["rules"] == "tcp:2600-2900"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GLOO_PORT_RANGE": "80-90"}, "GLOO_PORT_RANGE: must lie within 1024-65535"),
        ({"NCCL_PORT_RANGE": "5000"}, "NCCL_PORT_RANGE: must be LOW-HIGH or LOW:HIGH"),
        ({"NCCL_PORT_RANGE": "6000-5000"}, "NCCL_PORT_RANGE: must lie within"),
        ({"TENSORBOARD_SOURCE_RANGES": "0.0.0.0/0"}, "would open TensorBoard to the world"),
        ({"AGENT_TAG": "Bad_Tag"}, "AGENT_TAG: must be a GCE network tag"),
    ],
)
def test_gcp_bad_settings_are_refused_by_name(env: dict[str, str], message: str) -> None:
    done = _dry_run(**env)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stdout == ""  # nothing half-printed


# The seeds' ports that nothing in Corral uses (docs/aws.md and docs/gcp.md say so, and why
# they are open anyway). Should Corral start serving one of them, this fails: the docs must
# then say what listens there.
UNUSED_BY_CORRAL = ("1734", "1750", "12350", "2600", "2900")


def _corral_sources() -> list[Path]:
    roots = [ROOT / "agent_runtime", ROOT / "functions" / "corral"]
    return [p for r in roots for p in r.rglob("*") if p.suffix in (".py", ".tmpl", ".sh")]


def test_the_docs_say_which_opened_ports_corral_uses_and_the_code_agrees() -> None:
    aws = (ROOT / "docs" / "aws.md").read_text()
    gcp = (ROOT / "docs" / "gcp.md").read_text()
    claim = "Nothing in Corral listens on 1734, 1750, 12350 or 2600-2900"

    assert claim in " ".join(aws.split()) and claim in " ".join(gcp.split())
    for row in ("| 1734, 1750 |", "| 12350 |", "| 2600-2900 |"):
        line = next(x for x in aws.splitlines() if x.startswith(row))
        assert line.rstrip().endswith("| nothing listens (see below) |"), line
    using = {
        str(path.relative_to(ROOT)): port
        for path in _corral_sources()
        for port in UNUSED_BY_CORRAL
        if re.search(rf"(?<![\d.]){port}(?![\d.])", path.read_text(errors="replace"))
    }
    assert using == {}
    # What Corral does use: the rendezvous port its multi-node trials get.
    spec = (ROOT / "functions/corral/services/shared/assignment_spec.py").read_text()
    assert "RENDEZVOUS_PORT = 12355" in spec
