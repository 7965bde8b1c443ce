"""GPU detection through a fake ``nvidia-smi`` first on PATH, and the unhealthy path through
``corral-agent``'s real entry point: fewer GPUs than promised -> the machine is reported
unhealthy (never registered as a short-handed agent), exit 2."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agent_runtime.agent import EXIT_UNHEALTHY
from agent_runtime.config import AgentConfig
from agent_runtime.gpus import check_expected, detect_gpus, gpu_metrics
from agent_runtime.main import main
from tests.agent.conftest import FakeControlPlane

FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=index,uuid,name,memory.total)
    echo "0, GPU-aaaa, NVIDIA A10G, 23028" ;;
  --query-gpu=index,utilization.gpu,memory.used)
    echo "0, 87, 20480" ;;
  *) exit 9 ;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    return smi


def _config(**kw: object) -> AgentConfig:
    base: dict[str, object] = {
        "api_url": "http://cp",
        "dev_token": "t",
        "dev_instance_id": "i-1",
        "gpu_detection": "nvidia-smi",
    }
    base.update(kw)
    return AgentConfig.model_validate(base)


def test_nvidia_smi_parsing_and_metrics(fake_smi: Path) -> None:
    (gpu,) = detect_gpus(_config())
    assert (gpu.index, gpu.uuid, gpu.name, gpu.memory_mib) == (0, "GPU-aaaa", "NVIDIA A10G", 23028)
    (metric,) = gpu_metrics(_config())
    assert (metric.utilization_pct, metric.memory_used_mib) == (87.0, 20480.0)
    check_expected([gpu], 1)


def test_fewer_gpus_than_promised_does_not_register(
    fake_smi: Path, plane: FakeControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(
        json.dumps(
            {
                "api_url": plane.url,
                "auth": "dev",
                "dev_token": "t",
                "dev_instance_id": "i-1",
                "expected_gpus": 4,
                "executor": "process",
                "work_dir": str(tmp_path / "w"),
            }
        )
    )
    with caplog.at_level(logging.CRITICAL):
        code = main(["--config", str(config)])
    assert code == EXIT_UNHEALTHY
    assert "found 1 GPU(s) but this instance should have 4" in caplog.text
    # One report so the control plane terminates the instance now; then nothing else.
    (report,) = plane.requests
    assert report.path == "/agents/register"
    assert "found 1 GPU(s) but this instance should have 4" in report.body["unhealthy_reason"]
    assert len(report.body["gpus"]) == 1


def test_missing_nvidia_smi_with_gpus_promised_is_unhealthy(
    plane: FakeControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    monkeypatch.setenv("CORRAL_AGENT_API_URL", plane.url)
    monkeypatch.setenv("CORRAL_AGENT_DEV_TOKEN", "t")
    monkeypatch.setenv("CORRAL_AGENT_DEV_INSTANCE_ID", "i-1")
    monkeypatch.setenv("CORRAL_AGENT_EXPECTED_GPUS", "1")
    monkeypatch.setenv("CORRAL_AGENT_GPU_DETECTION", "nvidia-smi")
    monkeypatch.setenv("CORRAL_AGENT_EXECUTOR", "process")
    monkeypatch.setenv("CORRAL_AGENT_WORK_DIR", str(tmp_path / "w"))
    assert main([]) == EXIT_UNHEALTHY
    (report,) = plane.requests
    assert "GPU detection failed" in report.body["unhealthy_reason"]
    assert report.body["gpus"] == []
