"""GPU detection through a fake ``nvidia-smi`` first on PATH, and the unhealthy path through
``corral-agent``'s real entry point: fewer GPUs than promised -> the machine is reported
unhealthy (never registered as a short-handed agent), exit 2."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent_runtime import gpus
from agent_runtime.agent import EXIT_UNHEALTHY
from agent_runtime.config import AgentConfig
from agent_runtime.gpus import check_expected, detect_gpus, gpu_metrics
from agent_runtime.main import main
from tests.agent.conftest import FakeControlPlane, dev_config

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
    return dev_config(**{"gpu_detection": "nvidia-smi", **kw})


def test_nvidia_smi_parsing_and_metrics(fake_smi: Path) -> None:
    (gpu,) = detect_gpus(_config())
    assert (gpu.index, gpu.uuid, gpu.name, gpu.memory_mib) == (0, "GPU-aaaa", "NVIDIA A10G", 23028)
    (metric,) = gpu_metrics(_config())
    assert (metric.utilization_pct, metric.memory_used_mib) == (87.0, 20480.0)
    check_expected([gpu], 1)


class _FakeNvml:
    """Two GPUs as pynvml answers for them: bytes from older releases (GPU 0), str from newer
    ones (GPU 1)."""

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return 100 + index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes | str:
        return b"GPU-0000" if handle == 100 else "GPU-0001"

    def nvmlDeviceGetName(self, handle: int) -> bytes | str:
        return b"NVIDIA A10G" if handle == 100 else "NVIDIA L4"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=(handle - 99) * 16 * 2**30, used=(handle - 99) * 2**29)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=40 + handle - 100)


def test_nvml_detection_and_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "_nvml", _FakeNvml)
    config = _config(gpu_detection="nvml")
    assert [(g.index, g.uuid, g.name, g.memory_mib) for g in detect_gpus(config)] == [
        (0, "GPU-0000", "NVIDIA A10G", 16384),
        (1, "GPU-0001", "NVIDIA L4", 32768),
    ]
    assert [(m.index, m.utilization_pct, m.memory_used_mib) for m in gpu_metrics(config)] == [
        (0, 40.0, 512.0),
        (1, 41.0, 1024.0),
    ]


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
