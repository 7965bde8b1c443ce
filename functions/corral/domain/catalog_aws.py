"""EC2 rows of the instance catalog: every current NVIDIA GPU family, older GPU types that
Determined configs still name, and the CPU types Determined uses for auxiliary (zero-GPU) pools.

Prices are APPROXIMATE on-demand list prices (us-east-1, Linux) as of ``PRICES_AS_OF``; spot is a
typical recent figure. GPU rows are written out one per line; CPU families are priced per vCPU
(EC2 prices every size of these families linearly), burstable ``t`` types per GiB of memory.
Left out on purpose: AMD GPUs (``g4ad``; the agent finds GPUs with NVML), fractional GPUs
(``g6f``, ``gr6f``), and accelerators that are not GPUs (``dl1``, ``inf*``, ``trn*``).
"""

from __future__ import annotations

from corral.domain.catalog_types import InstanceType


# Positional arguments keep each table row on one readable line.
def _gpu(
    name: str, gpus: int, model: str, mem: int, vcpus: int, ram: float, od: float, spot: float
) -> InstanceType:
    return InstanceType("aws", name, gpus, model, mem, vcpus, ram, od, spot)


GPU_TYPES: tuple[InstanceType, ...] = (
    _gpu("p2.xlarge", 1, "K80", 12, 4, 61, 0.90, 0.27),
    _gpu("p2.8xlarge", 8, "K80", 12, 32, 488, 7.20, 2.16),
    _gpu("p2.16xlarge", 16, "K80", 12, 64, 732, 14.40, 4.32),
    _gpu("p3.2xlarge", 1, "V100", 16, 8, 61, 3.06, 0.92),
    _gpu("p3.8xlarge", 4, "V100", 16, 32, 244, 12.24, 3.67),
    _gpu("p3.16xlarge", 8, "V100", 16, 64, 488, 24.48, 7.34),
    _gpu("p3dn.24xlarge", 8, "V100", 32, 96, 768, 31.212, 9.36),
    _gpu("p4d.24xlarge", 8, "A100", 40, 96, 1152, 21.96, 9.50),
    _gpu("p4de.24xlarge", 8, "A100", 80, 96, 1152, 27.45, 12.00),
    _gpu("p5.4xlarge", 1, "H100", 80, 16, 256, 6.88, 3.44),
    _gpu("p5.48xlarge", 8, "H100", 80, 192, 2048, 55.04, 28.00),
    _gpu("p5e.48xlarge", 8, "H200", 141, 192, 2048, 60.00, 30.00),
    _gpu("p5en.48xlarge", 8, "H200", 141, 192, 2048, 63.30, 31.65),
    _gpu("p6-b200.48xlarge", 8, "B200", 179, 192, 2048, 113.93, 56.97),
    _gpu("g3s.xlarge", 1, "M60", 8, 4, 30.5, 0.75, 0.23),
    _gpu("g3.4xlarge", 1, "M60", 8, 16, 122, 1.14, 0.34),
    _gpu("g3.8xlarge", 2, "M60", 8, 32, 244, 2.28, 0.68),
    _gpu("g3.16xlarge", 4, "M60", 8, 64, 488, 4.56, 1.37),
    _gpu("g4dn.xlarge", 1, "T4", 16, 4, 16, 0.526, 0.21),
    _gpu("g4dn.2xlarge", 1, "T4", 16, 8, 32, 0.752, 0.30),
    _gpu("g4dn.4xlarge", 1, "T4", 16, 16, 64, 1.204, 0.48),
    _gpu("g4dn.8xlarge", 1, "T4", 16, 32, 128, 2.176, 0.87),
    _gpu("g4dn.16xlarge", 1, "T4", 16, 64, 256, 4.352, 1.74),
    _gpu("g4dn.12xlarge", 4, "T4", 16, 48, 192, 3.912, 1.55),
    _gpu("g4dn.metal", 8, "T4", 16, 96, 384, 7.824, 3.10),
    _gpu("g5.xlarge", 1, "A10G", 24, 4, 16, 1.006, 0.40),
    _gpu("g5.2xlarge", 1, "A10G", 24, 8, 32, 1.212, 0.48),
    _gpu("g5.4xlarge", 1, "A10G", 24, 16, 64, 1.624, 0.65),
    _gpu("g5.8xlarge", 1, "A10G", 24, 32, 128, 2.448, 0.98),
    _gpu("g5.16xlarge", 1, "A10G", 24, 64, 256, 4.096, 1.64),
    _gpu("g5.12xlarge", 4, "A10G", 24, 48, 192, 5.672, 2.25),
    _gpu("g5.24xlarge", 4, "A10G", 24, 96, 384, 8.144, 3.26),
    _gpu("g5.48xlarge", 8, "A10G", 24, 192, 768, 16.288, 6.50),
    _gpu("g5g.xlarge", 1, "T4G", 16, 4, 8, 0.42, 0.17),
    _gpu("g5g.2xlarge", 1, "T4G", 16, 8, 16, 0.556, 0.22),
    _gpu("g5g.4xlarge", 1, "T4G", 16, 16, 32, 0.828, 0.33),
    _gpu("g5g.8xlarge", 1, "T4G", 16, 32, 64, 1.372, 0.55),
    _gpu("g5g.16xlarge", 2, "T4G", 16, 64, 128, 2.744, 1.10),
    _gpu("g5g.metal", 2, "T4G", 16, 64, 128, 2.744, 1.10),
    _gpu("g6.xlarge", 1, "L4", 24, 4, 16, 0.805, 0.32),
    _gpu("g6.2xlarge", 1, "L4", 24, 8, 32, 0.978, 0.39),
    _gpu("g6.4xlarge", 1, "L4", 24, 16, 64, 1.323, 0.53),
    _gpu("g6.8xlarge", 1, "L4", 24, 32, 128, 2.014, 0.81),
    _gpu("g6.16xlarge", 1, "L4", 24, 64, 256, 3.397, 1.36),
    _gpu("g6.12xlarge", 4, "L4", 24, 48, 192, 4.602, 1.85),
    _gpu("g6.24xlarge", 4, "L4", 24, 96, 384, 6.675, 2.67),
    _gpu("g6.48xlarge", 8, "L4", 24, 192, 768, 13.35, 5.35),
    _gpu("gr6.4xlarge", 1, "L4", 24, 16, 128, 1.539, 0.62),
    _gpu("gr6.8xlarge", 1, "L4", 24, 32, 256, 2.446, 0.98),
    _gpu("g6e.xlarge", 1, "L40S", 48, 4, 32, 1.861, 0.75),
    _gpu("g6e.2xlarge", 1, "L40S", 48, 8, 64, 2.242, 0.90),
    _gpu("g6e.4xlarge", 1, "L40S", 48, 16, 128, 3.004, 1.20),
    _gpu("g6e.8xlarge", 1, "L40S", 48, 32, 256, 4.529, 1.81),
    _gpu("g6e.16xlarge", 1, "L40S", 48, 64, 512, 7.577, 3.03),
    _gpu("g6e.12xlarge", 4, "L40S", 48, 48, 384, 10.493, 4.20),
    _gpu("g6e.24xlarge", 4, "L40S", 48, 96, 768, 15.066, 6.03),
    _gpu("g6e.48xlarge", 8, "L40S", 48, 192, 1536, 30.131, 12.05),
)

# vCPUs of each size name (the same in every family listed below).
_SIZE_VCPUS = {
    "large": 2, "xlarge": 4, "2xlarge": 8, "3xlarge": 12, "4xlarge": 16, "6xlarge": 24,
    "8xlarge": 32, "9xlarge": 36, "10xlarge": 40, "12xlarge": 48, "16xlarge": 64,
    "18xlarge": 72, "24xlarge": 96, "32xlarge": 128, "48xlarge": 192,
}  # fmt: skip

# The sizes most families come in (the 5th generation's, plus 32xlarge / 48xlarge after it).
_SIZES_5 = ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge")
_SIZES_C5 = ("large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "12xlarge", "18xlarge", "24xlarge")

# family: (USD per vCPU-hour on demand, GiB per vCPU, sizes). Spot: about 40% of on-demand.
_CPU_FAMILIES: dict[str, tuple[float, float, tuple[str, ...]]] = {
    "m4": (0.05, 4, ("large", "xlarge", "2xlarge", "4xlarge", "10xlarge", "16xlarge")),
    "m5": (0.048, 4, _SIZES_5),
    "m5d": (0.0565, 4, _SIZES_5),
    "m5n": (0.0595, 4, _SIZES_5),
    "m5dn": (0.068, 4, _SIZES_5),
    "m5zn": (0.0826, 4, ("large", "xlarge", "2xlarge", "3xlarge", "6xlarge", "12xlarge")),
    "m6i": (0.048, 4, (*_SIZES_5, "32xlarge")),
    "m7i": (0.0504, 4, (*_SIZES_5, "48xlarge")),
    "c4": (0.04975, 1.875, ("large", "xlarge", "2xlarge", "4xlarge")),
    "c5": (0.0425, 2, _SIZES_C5),
    "c5d": (0.048, 2, _SIZES_C5),
    "c5n": (0.054, 2.625, ("large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "18xlarge")),
    "c6i": (0.0425, 2, (*_SIZES_5, "32xlarge")),
    "c7i": (0.04463, 2, (*_SIZES_5, "48xlarge")),
}
_CPU_SPOT_SHARE = 0.4


def _cpu(name: str, vcpus: int, ram: float, od: float) -> InstanceType:
    return InstanceType("aws", name, 0, "", 0, vcpus, ram, od, round(od * _CPU_SPOT_SHARE, 4))


def _cpu_types() -> list[InstanceType]:
    found = [
        _cpu(f"{family}.{size}", vcpus, vcpus * ram, round(vcpus * per_vcpu, 4))
        for family, (per_vcpu, ram, sizes) in _CPU_FAMILIES.items()
        for size in sizes
        for vcpus in (_SIZE_VCPUS[size],)
    ]
    # Sizes off the family's pattern, and the burstable types (priced per GiB of memory).
    found += [
        _cpu("c4.8xlarge", 36, 60, 1.591),
        _cpu("t2.medium", 2, 4, 0.0464),
        _cpu("t2.large", 2, 8, 0.0928),
        _cpu("t2.xlarge", 4, 16, 0.1856),
        _cpu("t2.2xlarge", 8, 32, 0.3712),
    ]
    t3 = {"nano": (2, 0.5), "micro": (2, 1), "small": (2, 2), "medium": (2, 4), "large": (2, 8)}
    t3 |= {"xlarge": (4, 16), "2xlarge": (8, 32)}
    found += [_cpu(f"t3.{s}", v, ram, round(ram * 0.0104, 4)) for s, (v, ram) in t3.items()]
    return found


CPU_TYPES: tuple[InstanceType, ...] = tuple(_cpu_types())

AWS_INSTANCE_TYPES: dict[str, InstanceType] = {t.name: t for t in (*GPU_TYPES, *CPU_TYPES)}
