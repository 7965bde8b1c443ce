"""``container_startup_script`` runs on the host once per boot, before the executor (and the
Docker client that pulls trial images) exists; the seeds' recipe configures a credential
helper there. A failure makes the agent report itself unhealthy and exit without registering."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agent_runtime.agent import EXIT_UNHEALTHY
from agent_runtime.gpus import Unhealthy
from agent_runtime.main import main
from agent_runtime.startup import run_container_startup_script
from tests.agent.conftest import FakeControlPlane, dev_config

# The seeds' GCR recipe, with the helper's `configure-docker` standing in as what it does:
# write the credential helper into the Docker client config the agent's pulls read.
RECIPE = """
export HOME="$FAKE_HOME"
mkdir -p "$HOME/.docker"
echo '{"credHelpers": {"gcr.io": "gcr"}}' > "$HOME/.docker/config.json"
echo "proxy=$https_proxy"
"""


def test_the_script_runs_on_the_host_once_per_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_HOME", str(tmp_path / "root"))
    config = dev_config(
        container_startup_script=RECIPE,
        run_dir=tmp_path / "run",
        https_proxy="http://proxy:3128",
    )
    assert run_container_startup_script(config) is True
    written = json.loads((tmp_path / "root/.docker/config.json").read_text())
    assert written == {"credHelpers": {"gcr.io": "gcr"}}
    # systemd restarts the agent: the same boot does not run it again...
    (tmp_path / "root/.docker/config.json").unlink()
    assert run_container_startup_script(config) is False
    assert not (tmp_path / "root/.docker/config.json").exists()
    # ...a new boot (run_dir is a tmpfs, emptied) or a new script does.
    changed = config.model_copy(update={"container_startup_script": RECIPE + "true\n"})
    assert run_container_startup_script(changed) is True


def test_the_script_gets_the_proxies_and_none_of_the_agents_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, str] = {}

    def runner(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
        seen.update(env)
        assert argv[:2] == ["/bin/bash", "-c"]
        return 0, ""

    config = dev_config(container_startup_script="true", run_dir=tmp_path, http_proxy="http://p:1")
    monkeypatch.setenv("CORRAL_AGENT_DEV_TOKEN", "leak")
    run_container_startup_script(config, runner)  # type: ignore[arg-type]
    assert seen["http_proxy"] == seen["HTTP_PROXY"] == "http://p:1"
    assert "CORRAL_AGENT_DEV_TOKEN" not in seen


def test_a_failing_script_is_unhealthy(tmp_path: Path) -> None:
    config = dev_config(container_startup_script="echo no network; exit 7", run_dir=tmp_path)
    with pytest.raises(Unhealthy) as caught:
        run_container_startup_script(config)
    assert str(caught.value) == (
        "unhealthy: container_startup_script failed with exit code 7: no network; not registering"
    )
    assert not (tmp_path / "container_startup_script.done").exists()  # tried again next start


def test_the_agent_runs_it_before_registering_and_reports_a_failure(
    plane: FakeControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "agent.yaml"
    settings = {
        "api_url": plane.url,
        "auth": "dev",
        "dev_token": "t",
        "dev_instance_id": "i-1",
        "executor": "process",
        "work_dir": str(tmp_path / "w"),
        "run_dir": str(tmp_path / "run"),
        "container_startup_script": "exit 3",
    }
    config.write_text(json.dumps(settings))
    with caplog.at_level(logging.CRITICAL):
        assert main(["--config", str(config)]) == EXIT_UNHEALTHY
    (report,) = plane.requests  # reported once, never registered as a healthy agent
    assert report.path == "/agents/register"
    assert "container_startup_script failed with exit code 3" in report.body["unhealthy_reason"]
