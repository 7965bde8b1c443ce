"""Instance catalog: what each instance type has and roughly what it costs.

Prices are APPROXIMATE list prices as of ``PRICES_AS_OF`` (AWS us-east-1, GCP us-central1,
Linux, on-demand list price; spot is a typical recent figure, since spot prices move daily). They
are used to rank offerings and to estimate cost, never to bill anyone. AWS P4/P5 prices reflect
the mid-2025 price cut. Update the tables when prices move; a type that is missing here can still
be used (AWS pools set ``instance_slots``) and is priced at 0.0, i.e. "unknown".

The rows live in ``catalog_aws.py`` (every current NVIDIA GPU family, the older GPU types
Determined knows, and the CPU types of zero-GPU pools) and ``catalog_gcp.py`` (accelerators,
machine types with built-in GPUs, N1/N2 CPU machine types and N1 custom machine types).
GCP bills a machine type and its GPUs separately; the price of a GCP offering is the machine
part plus the GPUs.
"""

from __future__ import annotations

from corral.domain.catalog_aws import AWS_INSTANCE_TYPES
from corral.domain.catalog_gcp import (
    GCP_GPUS,
    GCP_MACHINE_TYPES,
    custom_n1_machine,
    takes_attached_gpus,
)
from corral.domain.catalog_types import PRICES_AS_OF, Cloud, GcpGpu, InstanceType

__all__ = [
    "AWS_INSTANCE_TYPES",
    "GCP_GPUS",
    "GCP_MACHINE_TYPES",
    "PRICES_AS_OF",
    "Cloud",
    "GcpGpu",
    "InstanceType",
    "gcp_gpu",
    "gcp_offering_price",
    "gpus_for",
    "lookup_aws",
    "lookup_gcp_machine",
    "takes_attached_gpus",
]


def lookup_aws(name: str) -> InstanceType | None:
    """The catalog entry for an EC2 instance type, or None when we do not know it."""
    return AWS_INSTANCE_TYPES.get(name)


def lookup_gcp_machine(machine_type: str) -> InstanceType | None:
    """A predefined machine type, or an N1 custom one (``custom-8-30720``); None if unknown."""
    return GCP_MACHINE_TYPES.get(machine_type) or custom_n1_machine(machine_type)


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
