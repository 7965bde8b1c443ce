"""GCE rows of the instance catalog: accelerator types and machine types.

GCP bills a machine type and its GPUs separately: N1 machines (predefined or custom) take
attached GPUs (``gpu_type`` x ``gpu_num``), while A2, G2, G4, A3, A4 and A4X machines have their
GPUs built in. Prices are APPROXIMATE us-central1 list prices as of ``PRICES_AS_OF``; spot is a
typical recent figure. CPU machine types are priced per vCPU (GCE prices each predefined family
linearly); custom N1 machines per vCPU and GB of memory.
"""

from __future__ import annotations

import re

from corral.domain.catalog_types import GcpGpu, InstanceType

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
        GcpGpu("nvidia-rtx-pro-6000", "RTX PRO 6000", 96, 3.20, 1.30, (1, 2, 4, 8), False),
        GcpGpu("nvidia-h100-80gb", "H100", 80, 10.00, 3.70, (1, 2, 4, 8), False),
        GcpGpu("nvidia-h100-mega-80gb", "H100", 80, 10.50, 3.90, (8,), False),
        GcpGpu("nvidia-h200-141gb", "H200", 141, 10.60, 4.20, (8,), False),
        GcpGpu("nvidia-b200", "B200", 180, 12.00, 5.00, (8,), False),
        GcpGpu("nvidia-gb200", "GB200", 186, 13.00, 5.40, (4,), False),
    )
}


def _gcp(
    name: str, gpus: int, gpu: str, vcpus: int, ram: float, od: float, spot: float
) -> InstanceType:
    memory = GCP_GPUS[gpu].memory_gib if gpu else 0
    return InstanceType("gcp", name, gpus, gpu, memory, vcpus, ram, od, spot)


# `gpu_model` holds the GCE accelerator type of built-in GPUs ("" for the others).
_GPU_MACHINES = (
    _gcp("a2-highgpu-1g", 1, "nvidia-tesla-a100", 12, 85, 0.74, 0.22),
    _gcp("a2-highgpu-2g", 2, "nvidia-tesla-a100", 24, 170, 1.48, 0.44),
    _gcp("a2-highgpu-4g", 4, "nvidia-tesla-a100", 48, 340, 2.95, 0.89),
    _gcp("a2-highgpu-8g", 8, "nvidia-tesla-a100", 96, 680, 5.91, 1.77),
    _gcp("a2-megagpu-16g", 16, "nvidia-tesla-a100", 96, 1360, 8.85, 2.65),
    _gcp("a2-ultragpu-1g", 1, "nvidia-a100-80gb", 12, 170, 1.14, 0.34),
    _gcp("a2-ultragpu-2g", 2, "nvidia-a100-80gb", 24, 340, 2.28, 0.68),
    _gcp("a2-ultragpu-4g", 4, "nvidia-a100-80gb", 48, 680, 4.56, 1.37),
    _gcp("a2-ultragpu-8g", 8, "nvidia-a100-80gb", 96, 1360, 9.11, 2.73),
    _gcp("g2-standard-4", 1, "nvidia-l4", 4, 16, 0.15, 0.05),
    _gcp("g2-standard-8", 1, "nvidia-l4", 8, 32, 0.29, 0.09),
    _gcp("g2-standard-12", 1, "nvidia-l4", 12, 48, 0.44, 0.13),
    _gcp("g2-standard-16", 1, "nvidia-l4", 16, 64, 0.59, 0.18),
    _gcp("g2-standard-24", 2, "nvidia-l4", 24, 96, 0.88, 0.26),
    _gcp("g2-standard-32", 1, "nvidia-l4", 32, 128, 1.17, 0.35),
    _gcp("g2-standard-48", 4, "nvidia-l4", 48, 192, 1.76, 0.53),
    _gcp("g2-standard-96", 8, "nvidia-l4", 96, 384, 3.52, 1.06),
    _gcp("g4-standard-48", 1, "nvidia-rtx-pro-6000", 48, 180, 1.50, 0.60),
    _gcp("g4-standard-96", 2, "nvidia-rtx-pro-6000", 96, 360, 3.00, 1.20),
    _gcp("g4-standard-192", 4, "nvidia-rtx-pro-6000", 192, 720, 6.00, 2.40),
    _gcp("g4-standard-384", 8, "nvidia-rtx-pro-6000", 384, 1440, 12.00, 4.80),
    _gcp("a3-highgpu-1g", 1, "nvidia-h100-80gb", 26, 234, 1.03, 0.31),
    _gcp("a3-highgpu-2g", 2, "nvidia-h100-80gb", 52, 468, 2.06, 0.62),
    _gcp("a3-highgpu-4g", 4, "nvidia-h100-80gb", 104, 936, 4.13, 1.25),
    _gcp("a3-highgpu-8g", 8, "nvidia-h100-80gb", 208, 1872, 8.25, 2.50),
    _gcp("a3-edgegpu-8g", 8, "nvidia-h100-80gb", 208, 1872, 8.25, 2.50),
    _gcp("a3-megagpu-8g", 8, "nvidia-h100-mega-80gb", 208, 1872, 8.50, 2.60),
    _gcp("a3-ultragpu-8g", 8, "nvidia-h200-141gb", 224, 2952, 9.00, 2.80),
    _gcp("a4-highgpu-8g", 8, "nvidia-b200", 224, 3968, 9.50, 3.00),
    _gcp("a4x-highgpu-4g", 4, "nvidia-gb200", 140, 884, 5.00, 1.60),
)

# family: (USD per vCPU-hour on demand, spot, GB per vCPU, vCPU counts).
_CPU_FAMILIES: dict[str, tuple[float, float, float, tuple[int, ...]]] = {
    "n1-standard": (0.0475, 0.01, 3.75, (1, 2, 4, 8, 16, 32, 64, 96)),
    "n1-highmem": (0.0592, 0.0125, 6.5, (2, 4, 8, 16, 32, 64, 96)),
    "n1-highcpu": (0.03545, 0.0075, 0.9, (2, 4, 8, 16, 32, 64, 96)),
    "n2-standard": (0.04855, 0.0117, 4, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)),
}

GCP_MACHINE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        *_GPU_MACHINES,
        *(
            _gcp(f"{family}-{n}", 0, "", n, n * ram, round(n * od, 4), round(n * spot, 4))
            for family, (od, spot, ram, counts) in _CPU_FAMILIES.items()
            for n in counts
        ),
    )
}

# N1 custom machine types: custom-<vCPUs>-<memory MB>, "-ext" for extended memory.
_CUSTOM_N1 = re.compile(r"^custom-(\d+)-(\d+)(-ext)?$")
_CUSTOM_VCPU = (0.033174, 0.00698)  # USD per vCPU-hour: on demand, spot
_CUSTOM_GB = (0.004446, 0.00094)  # USD per GB-hour


def custom_n1_machine(machine_type: str) -> InstanceType | None:
    """A catalog row for an N1 custom machine type (``custom-8-30720``), or None."""
    found = _CUSTOM_N1.match(machine_type)
    if found is None:
        return None
    vcpus, memory_gb = int(found[1]), int(found[2]) / 1024
    od, spot = (
        round(vcpus * v + memory_gb * g, 4) for v, g in zip(_CUSTOM_VCPU, _CUSTOM_GB, strict=False)
    )
    return _gcp(machine_type, 0, "", vcpus, memory_gb, od, spot)


def takes_attached_gpus(machine_type: str) -> bool:
    """N1 machines, predefined or custom, are the ones GCE attaches GPUs to."""
    return machine_type.startswith("n1-") or _CUSTOM_N1.match(machine_type) is not None
