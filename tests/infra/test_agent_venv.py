"""The agent as the image installs it (infra/agent-image/scripts/install-agent.sh): the
project's wheel, ``corral[agent]`` in a venv of its own, nothing else. Every import the agent
can reach (lazy ones too: boto3 is imported only when the first request is signed) must
import there, so a dependency the ``agent`` extra forgets fails here, not on an instance
whose agent exits at start, is restarted by systemd in a loop and never registers.

The venv is built once per test session: the wheel with pip (build isolation, as any
install does), then ``pip install 'corral-*.whl[agent]'`` from the package index (pip's cache
makes repeats quick). It runs with ``python -I``: no PYTHONPATH, no working directory, so
the developer's tree and venv cannot stand in for what the wheel ships.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).with_name("agent_imports.py")
# What the wheel is built from (pyproject.toml's packages and readme): copied, so the build's
# build/ and *.egg-info never land in the tree (nor race a parallel run's).
SOURCES = ("pyproject.toml", "README.md", "agent_runtime", "functions/corral")
OFFLINE = {
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AWS_"))}
    return {**env, **OFFLINE}


def _run(cmd: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, env=_env(), cwd=cwd, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def agent_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("agent-wheel")
    src, wheels = base / "src", base / "wheels"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip"]
    built = _run([*pip, "wheel", "--no-deps", "--quiet", "-w", str(wheels), f"{src}/"], base)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("corral-*.whl")
    return wheel


@pytest.fixture(scope="session")
def agent_venv(tmp_path_factory: pytest.TempPathFactory, agent_wheel: Path) -> Path:
    base = tmp_path_factory.mktemp("agent-venv")
    venv = base / "venv"
    pip = [sys.executable, "-m", "pip"]
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base)
    assert made.returncode == 0, made.stderr
    # pip --python installs into the new venv without bootstrapping a pip of its own there.
    installed = _run(
        [
            *pip,
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--quiet",
            f"{agent_wheel}[agent]",
        ],
        base,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv


def _python(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run([str(venv / "bin" / "python"), "-I", *args], venv)


def test_every_import_the_agent_can_reach_is_installed_by_the_agent_extra(
    agent_venv: Path,
) -> None:
    done = _python(agent_venv, str(CHECKER))
    report = json.loads(done.stdout) if done.stdout.strip() else {}

    assert report.get("failures") == [], done.stdout + done.stderr
    assert done.returncode == 0, done.stderr
    # What was checked: the lazy imports too, and the corral modules the agent reaches.
    assert {"boto3", "botocore.auth", "docker", "corral.protocol.agent"} <= set(report["checked"])


def test_the_venv_holds_the_wheel_not_the_developers_tree(agent_venv: Path) -> None:
    done = _python(
        agent_venv,
        "-c",
        "import agent_runtime, corral, importlib.util as u; "
        "print(agent_runtime.__file__); print(corral.__file__); "
        "print(u.find_spec('moto'), u.find_spec('chalice'))",
    )

    agent_file, corral_file, dev_only = done.stdout.splitlines()
    assert agent_file.startswith(str(agent_venv)), agent_file
    assert corral_file.startswith(str(agent_venv)), corral_file
    assert dev_only == "None None"  # the dev extras are not here: only corral[agent] is


def test_the_installed_corral_agent_starts(agent_venv: Path) -> None:
    done = _run([str(agent_venv / "bin" / "corral-agent"), "--help"], agent_venv)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "usage" in done.stdout.lower()


SIGN_AND_BUILD = """
import boto3
from agent_runtime.client import SigV4Auth
from agent_runtime.logs import CloudWatchLogs
from agent_runtime.metrics import CloudWatchMetrics

session = boto3.Session(aws_access_key_id="AKIDAGENT", aws_secret_access_key="secret",
                        aws_session_token="token", region_name="eu-west-1")
url = "https://abc.execute-api.eu-west-1.amazonaws.com/v1/agents/register"
headers = SigV4Auth("eu-west-1", session=session).headers("POST", url, b"{}", {})
print(headers["Authorization"])
CloudWatchLogs("corral/trials", "i-0abc", "eu-west-1")
CloudWatchMetrics("Corral/Agents", {"Pool": "gpu"}, 60.0, "eu-west-1")
"""


def test_an_ec2_agent_signs_and_reaches_cloudwatch_from_its_own_venv(agent_venv: Path) -> None:
    done = _python(agent_venv, "-c", SIGN_AND_BUILD)

    assert done.returncode == 0, done.stderr
    authorization = done.stdout.strip()
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDAGENT/"), authorization
    assert "/eu-west-1/execute-api/aws4_request" in authorization


def test_the_wheel_states_its_license_as_an_spdx_expression(agent_wheel: Path) -> None:
    """The ``license = {text = ...}`` table is deprecated by setuptools (a warning at every
    install; removal announced for 2027-02-18): the SPDX string is written as
    ``License-Expression``."""
    with zipfile.ZipFile(agent_wheel) as wheel:
        (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        headers = wheel.read(name).decode().split("\n\n", 1)[0].splitlines()

    assert "License-Expression: Apache-2.0" in headers
    assert not any(h.startswith("License:") for h in headers)
