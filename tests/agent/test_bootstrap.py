"""The rendered bootstrap script, actually run with bash (install/start steps in dry-run)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from corral.bootstrap import BootstrapSettings, render_bootstrap
from corral.bootstrap.render import EC2_USER_DATA_LIMIT
from tests.bootstrap_runner import run_bootstrap


def _settings(**kw: object) -> BootstrapSettings:
    base: dict[str, object] = {
        "api_url": "https://api.example.com",
        "auth": "aws",
        "pool": "gpu-pool",
        "record_id": "rec-9",
        "startup_script": "echo startup-script-ran\n",
        "container_startup_script": "export HOME=/root\ndocker-credential-gcr configure-docker\n",
        "expected_gpus": 4,
        "agent_docker_runtime": "nvidia",
    }
    base.update(kw)
    return BootstrapSettings(**base)  # type: ignore[arg-type]


def _run(script: str, root: Path) -> subprocess.CompletedProcess[str]:
    done = run_bootstrap(script, root, timeout_s=10)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def test_startup_script_runs_first_then_config_then_agent(tmp_path: Path) -> None:
    script = render_bootstrap(_settings(agent_wheel_url="https://cp.example.com/corral.whl"))
    assert script.startswith("#!/bin/bash")
    assert "set -euo pipefail" in script
    done = _run(script, tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("startup-script-ran") < out.index("DRY-RUN: python3 -m venv")
    assert "corral[agent] @ https://cp.example.com/corral.whl" in out
    assert "DRY-RUN: systemctl enable --now corral-agent.service" in out
    config = json.loads((tmp_path / "etc/corral/agent.yaml").read_text())
    assert config["api_url"] == "https://api.example.com"
    assert config["auth"] == "aws" and config["pool"] == "gpu-pool"
    assert config["record_id"] == "rec-9" and config["expected_gpus"] == 4
    assert config["container_startup_script"].startswith("export HOME=/root")
    assert "http_proxy" not in config  # unset keys leave the agent's defaults
    unit = (tmp_path / "etc/systemd/system/corral-agent.service").read_text()
    assert "RestartPreventExitStatus=2 3 4" in unit
    assert "--config /etc/corral/agent.yaml" in unit


def test_failing_startup_script_aborts_the_boot(tmp_path: Path) -> None:
    script = render_bootstrap(_settings(startup_script="echo about-to-fail\nexit 7\n"))
    done = _run(script, tmp_path)
    assert done.returncode == 7
    assert "startup_script failed with exit code 7" in done.stderr
    assert "DRY-RUN" not in done.stdout  # nothing installed or started
    assert not (tmp_path / "etc/corral/agent.yaml").exists()


def test_user_text_is_kept_verbatim(tmp_path: Path) -> None:
    tricky = "cat <<'X'\nCORRAL_STARTUP_EOF_0\n@@AGENT_CONFIG@@ $HOME 'q' \"dq\"\nX\n"
    script = render_bootstrap(_settings(startup_script=tricky, pool="it's"))
    done = _run(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "CORRAL_STARTUP_EOF_0\n@@AGENT_CONFIG@@ $HOME 'q' \"dq\"" in done.stdout
    assert (tmp_path / "etc/corral/startup_script.sh").read_text() == tricky
    unit = (tmp_path / "etc/systemd/system/corral-agent.service").read_text()
    assert f"ExecStart={tmp_path}/bin/corral-agent --config" in unit  # the preinstalled one


def test_size_fits_ec2_user_data_and_oversize_is_refused() -> None:
    typical = render_bootstrap(_settings(startup_script="apt-get update\n" * 100))
    assert len(typical.encode()) < EC2_USER_DATA_LIMIT
    with pytest.raises(ValueError, match="user-data limit"):
        render_bootstrap(_settings(startup_script="x" * EC2_USER_DATA_LIMIT))


def test_a_root_prefixed_boot_writes_and_starts_everything_under_root(tmp_path: Path) -> None:
    """The local stack's machines boot this way (no systemd, the image's agent under ROOT):
    the config, the logs and the agent started are the disk's, never /etc or /opt."""
    root = tmp_path / "disk"
    agent = root / "opt/corral-agent/bin/corral-agent"
    agent.parent.mkdir(parents=True)
    # The "agent" records how it was started, then stays up a moment as a real one would.
    agent.write_text('#!/bin/sh\necho "$@" > "$CORRAL_AGENT_WORK_DIR/args"\nexec sleep 30\n')
    agent.chmod(0o755)
    script = tmp_path / "user-data.sh"
    script.write_text(render_bootstrap(_settings()))
    done = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
        env={"PATH": "/usr/bin:/bin", "CORRAL_BOOTSTRAP_ROOT": str(root)},  # no corral-agent
        start_new_session=True,
    )
    pid_file = root / "run/corral-agent.pid"
    try:
        assert done.returncode == 0, done.stderr
        assert "starting the agent with nohup" in done.stderr
        args = root / "var/lib/corral/args"
        for _ in range(200):
            if args.exists() and args.read_text():
                break
            time.sleep(0.05)  # the agent is a real process: its start is real time
        config = root / "etc/corral/agent.yaml"
        assert args.read_text().split() == ["--config", str(config)]
        assert json.loads(config.read_text())["pool"] == "gpu-pool"
        assert (root / "var/log/corral-bootstrap.log").exists()
        assert not (root / "etc/systemd").exists()  # no systemd under ROOT: no unit written
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
