"""What a deployment tells its functions (the agent image, the GCP project and zone: values a
pool may leave out, corral.domain.config.deployment) and the GCP dead-letter topic, read from
infra/template.yaml and from the dry run of infra/gcp/deploy.sh."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.domain.config.deployment import ENV_NAMES, defaults_from_env
from tests.infra import iam_rules

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "template.yaml"
DEPLOY_SH = ROOT / "infra" / "gcp" / "deploy.sh"
GCP_CONFIG = ROOT / "tests" / "fixtures" / "gcp" / "cluster.yaml"
IMAGE = "projects/p-1/global/images/corral-agent-20240601"


# ---- AWS: the template ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return iam_rules.load_template(TEMPLATE.read_text())


def test_agent_image_id_is_an_optional_parameter(template: dict[str, Any]) -> None:
    param = template["Parameters"]["AgentImageId"]
    assert param["Default"] == ""  # optional: pools may name their own image_id
    pattern = re.compile(param["AllowedPattern"])
    assert pattern.match("") and pattern.match("ami-0123456789abcdef0")
    assert not pattern.match("ubuntu-22.04")


def test_every_function_gets_the_agent_image_the_loader_reads(template: dict[str, Any]) -> None:
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    (name,) = [k for k, v in env.items() if v == {"Ref": "AgentImageId"}]
    assert name in ENV_NAMES["aws_image_id"]
    functions = {
        key: r
        for key, r in template["Resources"].items()
        if r["Type"] == "AWS::Serverless::Function"
    }
    assert len(functions) == 5
    for key, function in functions.items():
        # Globals reach each function unless it sets the variable itself.
        own = function["Properties"].get("Environment", {}).get("Variables", {})
        assert name not in own, key


def test_every_function_gets_the_agents_instance_profile_and_namespace(
    template: dict[str, Any],
) -> None:
    """A pool that leaves them out gets the stack's own (agent_identity.py): its agents sign
    with the profile the stack made, and put metrics where the agent role may."""
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    profile = env[ENV_NAMES["aws_instance_profile"][0]]
    assert profile == {
        "Fn::If": ["MakeAgentRole", {"Fn::GetAtt": ["AgentInstanceProfile", "Arn"]}, ""]
    }
    namespace = env[ENV_NAMES["aws_metrics_namespace"][0]]
    assert namespace == {"Ref": "AgentMetricsNamespace"}


# ---- GCP: the deploy script's dry run ------------------------------------------------------
def _dry_run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    base = {"PATH": os.environ["PATH"], "PROJECT": "p-1", "CONFIG_FILE": str(GCP_CONFIG)}
    base["PYTHON"] = sys.executable  # deploy.sh reads the config with Corral's loader
    return subprocess.run(
        ["bash", str(DEPLOY_SH), "--dry-run", *args],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _commands(out: str) -> list[list[str]]:
    return [shlex.split(line) for line in out.splitlines() if line.startswith("gcloud ")]


def _function_env(out: str) -> dict[str, dict[str, str]]:
    """Each deployed function's --set-env-vars, as a mapping (gcloud's ^;^ form)."""
    found = {}
    for words in _commands(out):
        if "functions" not in words or "deploy" not in words:
            continue
        name = words[words.index("deploy") + 1]
        (value,) = [w.split("=", 1)[1] for w in words if w.startswith("--set-env-vars=")]
        assert value.startswith("^;^")
        found[name] = dict(pair.split("=", 1) for pair in value[3:].split(";"))
    return found


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--zone=us-central1-a,us-central1-b", f"--agent-image={IMAGE}"), {}),
        (("--zone", "us-central1-a,us-central1-b", "--agent-image", IMAGE), {}),
        ((), {"ZONE": "us-central1-a,us-central1-b", "AGENT_IMAGE": IMAGE}),
    ],
)
def test_the_functions_get_the_project_zone_and_image(
    args: tuple[str, ...], env: dict[str, str]
) -> None:
    done = _dry_run(*args, **env)
    assert done.returncode == 0, done.stderr
    functions = _function_env(done.stdout)
    assert len(functions) == 5
    for name, variables in functions.items():
        # What the functions' config loader makes of them.
        defaults = defaults_from_env(variables)
        assert defaults.gcp_project is not None and defaults.gcp_project.value == "p-1", name
        assert defaults.gcp_zone is not None
        assert defaults.gcp_zone.value == "us-central1-a,us-central1-b"
        assert defaults.gcp_image is not None and defaults.gcp_image.value == IMAGE


@pytest.mark.parametrize(("env", "tag"), [({}, "corral-agent"), ({"AGENT_TAG": "gpu-x"}, "gpu-x")])
def test_the_functions_get_the_agent_account_and_firewall_tag(
    env: dict[str, str], tag: str
) -> None:
    done = _dry_run(**env)
    assert done.returncode == 0, done.stderr
    for name, variables in _function_env(done.stdout).items():
        defaults = defaults_from_env(variables)
        assert defaults.gcp_service_account is not None, name
        assert defaults.gcp_service_account.value == "corral-agent@p-1.iam.gserviceaccount.com"
        assert defaults.gcp_network_tag is not None and defaults.gcp_network_tag.value == tag


def test_zone_and_image_are_optional() -> None:
    done = _dry_run()
    assert done.returncode == 0, done.stderr
    for variables in _function_env(done.stdout).values():
        assert variables["GOOGLE_CLOUD_PROJECT"] == "p-1"
        assert "CORRAL_ZONE" not in variables and "CORRAL_AGENT_IMAGE" not in variables


def test_an_unknown_option_is_refused() -> None:
    done = _dry_run("--zones=us-central1-a")
    assert done.returncode == 2 and "unknown argument --zones" in done.stderr
    assert _dry_run("--zone").returncode == 2  # no value


def commands_with(commands: list[list[str]], *words: str) -> list[list[str]]:
    return [c for c in commands if all(w in c for w in words)]


def _option(words: list[str], name: str) -> str | None:
    values = [w.split("=", 1)[1] for w in words if w.startswith(f"--{name}=")]
    return values[0] if values else None


def _seconds(value: str) -> int:
    number, unit = int(value[:-1]), value[-1]
    return number * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


def test_failing_commands_are_dead_lettered_before_they_expire() -> None:
    done = _dry_run()
    assert done.returncode == 0, done.stderr
    commands = _commands(done.stdout)
    dead_letter = "corral-dead-letter"
    assert commands_with(commands, "pubsub", "topics", "create", dead_letter)
    # A topic without a subscription drops what is published to it.
    (holder,) = commands_with(commands, "subscriptions", "create")
    assert _option(holder, "topic") == dead_letter
    assert _seconds(_option(holder, "message-retention-duration") or "0s") >= 7 * 86400

    updates = commands_with(commands, "subscriptions", "update")
    assert len(updates) == 3  # schedule, scale-up, spot-reconcile: the retried triggers
    for words in updates:
        assert _option(words, "dead-letter-topic") == dead_letter
        attempts = int(_option(words, "max-delivery-attempts") or 0)
        assert 5 <= attempts <= 100  # Pub/Sub's bounds
        # Dead-lettered while still retained: even at the longest backoff between attempts.
        longest = _seconds(_option(words, "max-retry-delay") or "0s")
        retention = _seconds(_option(words, "message-retention-duration") or "0s")
        assert attempts * longest < retention


def test_the_pubsub_service_agent_may_move_dead_letters() -> None:
    done = _dry_run()
    assert done.returncode == 0, done.stderr
    agent = "serviceAccount:service-0@gcp-sa-pubsub.iam.gserviceaccount.com"
    grants = {(b.target, b.role) for b in iam_rules.bindings(done.stdout) if b.member == agent}
    subscriptions = {
        words[words.index("update") + 1]
        for words in commands_with(_commands(done.stdout), "subscriptions", "update")
    }
    assert grants == {("topic corral-dead-letter", "roles/pubsub.publisher")} | {
        (f"pubsub subscriptions {s}", "roles/pubsub.subscriber") for s in subscriptions
    }
