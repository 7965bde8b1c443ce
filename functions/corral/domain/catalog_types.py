"""The record types of the instance catalog (``catalog.py``); the rows live in
``catalog_aws.py`` and ``catalog_gcp.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Cloud = Literal["aws", "gcp"]

# The date of the list prices in the catalog (AWS us-east-1, GCP us-central1, Linux).
PRICES_AS_OF = "2026-11"


@dataclass(frozen=True, slots=True)
class InstanceType:
    """One EC2 instance type, or a GCE machine type with its built-in GPUs (0 for CPU types)."""

    cloud: Cloud
    name: str
    gpus: int
    gpu_model: str  # "" for CPU types; GCP: the accelerator type of built-in GPUs
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
