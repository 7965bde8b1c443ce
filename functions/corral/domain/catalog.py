"""GPU instance catalog: what each instance type has and roughly what it costs.

Prices are APPROXIMATE list prices as of 2026-11 (AWS us-east-1, GCP us-central1, Linux,
on-demand list price; spot is a typical recent figure, since spot prices move daily). They are
used to rank offerings and to estimate cost, never to bill anyone. AWS P4/P5 prices reflect the
mid-2025 price cut. Update the tables when prices move; a type that is missing here can still be
used (AWS pools set ``instance_slots``) and is priced at 0.0, i.e. "unknown".

GCP bills a machine type and its GPUs separately: N1 machines take attached GPUs
(``gpu_type`` x ``gpu_num``), while A2, G2, A3 and A4 machines have their GPUs built in. The
price of a GCP offering is the machine part plus the GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Cloud = Literal["aws", "gcp"]

PRICES_AS_OF = "2026-11"


@dataclass(frozen=True, slots=True)
class InstanceType:
    """One instance type with GPUs (AWS), or a GCP machine type with its built-in GPUs."""

    cloud: Cloud
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_gib: int  # per GPU
    vcpus: int
    memory_gib: float
    on_demand_usd_per_hour: float  # GCP: the machine part only, GPUs priced separately
    spot_usd_per_hour: float


@dataclass(frozen=True, slots=True)
class GcpGpu:
    """A GCP accelerator type: per-GPU hourly prices and the counts GCE allows per VM."""

    name: str
    model: str
    memory_gib: int
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float
    allowed_counts: tuple[int, ...]
    attachable_to_n1: bool  # False: only comes built into its own machine family


# Positional arguments keep each table row on one readable line.
def _aws(
    name: str, gpus: int, model: str, mem: int, vcpus: int, ram: float, od: float, spot: float
) -> InstanceType:
    return InstanceType("aws", name, gpus, model, mem, vcpus, ram, od, spot)


AWS_INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        _aws("g4dn.xlarge", 1, "T4", 16, 4, 16, 0.526, 0.21),
        _aws("g4dn.12xlarge", 4, "T4", 16, 48, 192, 3.912, 1.55),
        _aws("g4dn.metal", 8, "T4", 16, 96, 384, 7.824, 3.10),
        _aws("g5.xlarge", 1, "A10G", 24, 4, 16, 1.006, 0.40),
        _aws("g5.2xlarge", 1, "A10G", 24, 8, 32, 1.212, 0.48),
        _aws("g5.12xlarge", 4, "A10G", 24, 48, 192, 5.672, 2.25),
        _aws("g5.48xlarge", 8, "A10G", 24, 192, 768, 16.288, 6.50),
        _aws("g6.xlarge", 1, "L4", 24, 4, 16, 0.805, 0.32),
        _aws("g6.12xlarge", 4, "L4", 24, 48, 192, 4.602, 1.85),
        _aws("g6.48xlarge", 8, "L4", 24, 192, 768, 13.35, 5.35),
        _aws("g6e.xlarge", 1, "L40S", 48, 4, 32, 1.861, 0.75),
        _aws("g6e.12xlarge", 4, "L40S", 48, 48, 384, 10.493, 4.20),
        _aws("p2.xlarge", 1, "K80", 12, 4, 61, 0.90, 0.27),
        _aws("p2.8xlarge", 8, "K80", 12, 32, 488, 7.20, 2.16),
        _aws("p2.16xlarge", 16, "K80", 12, 64, 732, 14.40, 4.32),
        _aws("p3.2xlarge", 1, "V100", 16, 8, 61, 3.06, 0.92),
        _aws("p3.8xlarge", 4, "V100", 16, 32, 244, 12.24, 3.67),
        _aws("p3.16xlarge", 8, "V100", 16, 64, 488, 24.48, 7.34),
        _aws("p3dn.24xlarge", 8, "V100", 32, 96, 768, 31.212, 9.36),
        _aws("p4d.24xlarge", 8, "A100", 40, 96, 1152, 21.96, 9.50),
        _aws("p4de.24xlarge", 8, "A100", 80, 96, 1152, 27.45, 12.00),
        _aws("p5.48xlarge", 8, "H100", 80, 192, 2048, 55.04, 28.00),
    )
}

# Allowed counts follow the GCE GPU documentation: attached GPUs on N1 come in 1, 2, 4 or 8
# (T4/P4/P100 stop at 4); the others are fixed by the machine shapes that carry them.
GCP_GPUS: dict[str, GcpGpu] = {
    g.name: g
    for g in (
        GcpGpu("nvidia-tesla-t4", "T4", 16, 0.35, 0.11, (1, 2, 4), True),
        GcpGpu("nvidia-tesla-p4", "P4", 8, 0.60, 0.24, (1, 2, 4), True),
        GcpGpu("nvidia-tesla-p100", "P100", 16, 1.46, 0.43, (1, 2, 4), True),
        GcpGpu("nvidia-tesla-v100", "V100", 16, 2.48, 0.74, (1, 2, 4, 8), True),
        # K80 reached end of life on GCE in 2024; kept so old Determined configs validate.
        GcpGpu("nvidia-tesla-k80", "K80", 12, 0.45, 0.135, (1, 2, 4, 8), True),
        GcpGpu("nvidia-tesla-a100", "A100", 40, 2.93, 1.17, (1, 2, 4, 8, 16), False),
        GcpGpu("nvidia-a100-80gb", "A100", 80, 3.93, 1.57, (1, 2, 4, 8), False),
        GcpGpu("nvidia-l4", "L4", 24, 0.56, 0.22, (1, 2, 4, 8), False),
        GcpGpu("nvidia-h100-80gb", "H100", 80, 10.00, 3.70, (8,), False),
        GcpGpu("nvidia-h100-mega-80gb", "H100", 80, 10.50, 3.90, (8,), False),
        GcpGpu("nvidia-h200-141gb", "H200", 141, 10.60, 4.20, (8,), False),
        GcpGpu("nvidia-b200", "B200", 180, 12.00, 5.00, (8,), False),
    )
}


def _gcp(
    name: str, gpus: int, gpu: str, vcpus: int, ram: float, od: float, spot: float
) -> InstanceType:
    memory = GCP_GPUS[gpu].memory_gib if gpu else 0
    return InstanceType("gcp", name, gpus, gpu, memory, vcpus, ram, od, spot)


# `gpu_model` holds the GCE accelerator type for built-in GPUs ("" for N1 machines).
GCP_MACHINE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        _gcp("n1-standard-4", 0, "", 4, 15, 0.19, 0.04),
        _gcp("n1-standard-8", 0, "", 8, 30, 0.38, 0.08),
        _gcp("n1-standard-16", 0, "", 16, 60, 0.76, 0.16),
        _gcp("n1-standard-32", 0, "", 32, 120, 1.52, 0.32),
        _gcp("a2-highgpu-1g", 1, "nvidia-tesla-a100", 12, 85, 0.74, 0.22),
        _gcp("a2-highgpu-2g", 2, "nvidia-tesla-a100", 24, 170, 1.48, 0.44),
        _gcp("a2-highgpu-4g", 4, "nvidia-tesla-a100", 48, 340, 2.95, 0.89),
        _gcp("a2-highgpu-8g", 8, "nvidia-tesla-a100", 96, 680, 5.91, 1.77),
        _gcp("a2-megagpu-16g", 16, "nvidia-tesla-a100", 96, 1360, 8.85, 2.65),
        _gcp("a2-ultragpu-1g", 1, "nvidia-a100-80gb", 12, 170, 1.14, 0.34),
        _gcp("a2-ultragpu-8g", 8, "nvidia-a100-80gb", 96, 1360, 9.11, 2.73),
        _gcp("g2-standard-4", 1, "nvidia-l4", 4, 16, 0.15, 0.05),
        _gcp("g2-standard-8", 1, "nvidia-l4", 8, 32, 0.29, 0.09),
        _gcp("g2-standard-12", 1, "nvidia-l4", 12, 48, 0.44, 0.13),
        _gcp("g2-standard-24", 2, "nvidia-l4", 24, 96, 0.88, 0.26),
        _gcp("g2-standard-48", 4, "nvidia-l4", 48, 192, 1.76, 0.53),
        _gcp("g2-standard-96", 8, "nvidia-l4", 96, 384, 3.52, 1.06),
        _gcp("a3-highgpu-8g", 8, "nvidia-h100-80gb", 208, 1872, 8.25, 2.50),
        _gcp("a3-megagpu-8g", 8, "nvidia-h100-mega-80gb", 208, 1872, 8.50, 2.60),
        _gcp("a3-ultragpu-8g", 8, "nvidia-h200-141gb", 224, 2952, 9.00, 2.80),
        _gcp("a4-highgpu-8g", 8, "nvidia-b200", 224, 3968, 9.50, 3.00),
    )
}


def lookup_aws(name: str) -> InstanceType | None:
    """The catalog entry for an EC2 instance type, or None when we do not know it."""
    return AWS_INSTANCE_TYPES.get(name)


def lookup_gcp_machine(machine_type: str) -> InstanceType | None:
    return GCP_MACHINE_TYPES.get(machine_type)


def gcp_gpu(gpu_type: str) -> GcpGpu | None:
    return GCP_GPUS.get(gpu_type)


def gpus_for(cloud: Cloud, name: str, gpu_num: int = 0) -> int | None:
    """GPUs on one instance: the catalog's count, or ``gpu_num`` for GCP attached GPUs.

    None when an AWS type is unknown. On GCP a machine with built-in GPUs always has its own
    count; any other machine has exactly the ``gpu_num`` GPUs attached to it.
    """
    if cloud == "aws":
        entry = lookup_aws(name)
        return entry.gpus if entry is not None else None
    machine = lookup_gcp_machine(name)
    if machine is not None and machine.gpus:
        return machine.gpus
    return gpu_num


def gcp_offering_price(
    machine_type: str, gpu_type: str | None, gpu_num: int, spot: bool
) -> float | None:
    """USD per hour for a GCE VM: machine part plus GPUs; None when either is unknown."""
    machine = lookup_gcp_machine(machine_type)
    if machine is None:
        return None
    price = machine.spot_usd_per_hour if spot else machine.on_demand_usd_per_hour
    gpu_name = gpu_type or machine.gpu_model
    count = machine.gpus or gpu_num
    if count == 0:
        return round(price, 4)
    gpu = gcp_gpu(gpu_name)
    if gpu is None:
        return None
    per_gpu = gpu.spot_usd_per_hour if spot else gpu.on_demand_usd_per_hour
    return round(price + count * per_gpu, 4)
