"""GPU discovery and utilisation: NVML when ``pynvml`` imports and initialises, else
``nvidia-smi``; fake GPUs for the local stack.

An agent that finds fewer GPUs than its instance type promises must not register (Determined
registered zero-GPU agents, which were launched, idled and reaped in a loop): see
``check_expected``.
"""

from __future__ import annotations

import csv
import io
import logging
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from agent_runtime.config import AgentConfig
from corral.protocol.agent import GpuInfo, GpuMetric

log = logging.getLogger(__name__)

_SMI_TIMEOUT_S = 30.0


class GpuDetectionError(RuntimeError):
    pass


class Unhealthy(RuntimeError):
    """The machine is not what it should be; the agent must not register."""


def detect_gpus(config: AgentConfig) -> list[GpuInfo]:
    if config.fake_gpus is not None:
        return [
            GpuInfo(index=i, uuid=f"GPU-fake-{i:04d}", name="Fake GPU", memory_mib=16_384)
            for i in range(config.fake_gpus)
        ]
    if config.gpu_detection in ("auto", "nvml"):
        nvml = _nvml()
        if nvml is not None:
            return _nvml_gpus(nvml)
        if config.gpu_detection == "nvml":
            raise GpuDetectionError("NVML is not available (pynvml missing or no driver)")
    return _smi_gpus(config.nvidia_smi)


def check_expected(gpus: list[GpuInfo], expected: int | None) -> None:
    if expected is not None and len(gpus) < expected:
        raise Unhealthy(
            f"unhealthy: found {len(gpus)} GPU(s) but this instance should have {expected}; "
            "not registering (check the NVIDIA driver and `nvidia-smi`)"
        )


def gpu_metrics(config: AgentConfig) -> list[GpuMetric]:
    """Best effort: a metrics failure must never disturb trials or heartbeats."""
    if config.fake_gpus is not None:
        return [
            GpuMetric(index=i, utilization_pct=0, memory_used_mib=0)
            for i in range(config.fake_gpus)
        ]
    try:
        nvml = _nvml() if config.gpu_detection != "nvidia-smi" else None
        if nvml is not None:
            return [
                GpuMetric(
                    index=i,
                    utilization_pct=float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                    memory_used_mib=nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20,
                )
                for i, handle in _nvml_devices(nvml)
            ]
        rows = _smi(config.nvidia_smi, "index,utilization.gpu,memory.used")
        return [
            GpuMetric(index=int(r[0]), utilization_pct=_num(r[1]), memory_used_mib=_num(r[2]))
            for r in rows
        ]
    except (GpuDetectionError, OSError, ValueError, IndexError) as exc:
        log.debug("GPU metrics unavailable: %s", exc)
        return []


def _nvml() -> Any:
    """The initialised pynvml module, or None. Typed Any: pynvml ships no annotations."""
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError has many subclasses; any means "no NVML here"
        log.info("NVML unavailable (%s); falling back to nvidia-smi", exc)
        return None
    return pynvml


def _nvml_devices(nvml: Any) -> Iterator[tuple[int, Any]]:
    """(index, NVML handle) of every GPU NVML sees."""
    for i in range(nvml.nvmlDeviceGetCount()):
        yield i, nvml.nvmlDeviceGetHandleByIndex(i)


def _text(value: Any) -> str:
    # Older pynvml releases answer bytes, newer ones str.
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_gpus(nvml: Any) -> list[GpuInfo]:
    return [
        GpuInfo(
            index=i,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            name=_text(nvml.nvmlDeviceGetName(handle)),
            memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20),
        )
        for i, handle in _nvml_devices(nvml)
    ]


def _smi_gpus(binary: str) -> list[GpuInfo]:
    rows = _smi(binary, "index,uuid,name,memory.total")
    try:
        return [
            GpuInfo(index=int(r[0]), uuid=r[1], name=r[2], memory_mib=int(_num(r[3]))) for r in rows
        ]
    except (IndexError, ValueError) as exc:
        raise GpuDetectionError(f"unexpected nvidia-smi output: {rows!r}") from exc


def _smi(binary: str, fields: str) -> list[list[str]]:
    path = shutil.which(binary)
    if path is None:
        raise GpuDetectionError(f"{binary} not found on PATH (no NVIDIA driver?)")
    try:
        done = subprocess.run(
            [path, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=_SMI_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:  # a wedged driver hangs nvidia-smi
        raise GpuDetectionError(f"{binary} did not answer in {_SMI_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        raise GpuDetectionError(f"{binary} failed ({done.returncode}): {done.stderr.strip()}")
    return [
        [cell.strip() for cell in row]
        for row in csv.reader(io.StringIO(done.stdout))
        if row and any(cell.strip() for cell in row)
    ]


def _num(text: str) -> float:
    # nvidia-smi prints "[N/A]" or "[Not Supported]" for fields some GPUs lack.
    try:
        return float(text)
    except ValueError:
        return 0.0
