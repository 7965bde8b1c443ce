"""Reading Determined's (and PEDL's) ``master.yaml`` as a Corral cluster config.

The rename table (also in docs/configuration.md):

=====================================================  =========================================
Determined / PEDL                                      Corral
=====================================================  =========================================
``provisioner: {provider: aws, <fields>}`` (PEDL)      one pool ``default`` whose provider block
                                                       is ``{type: aws, <fields>}``
top-level ``provider: {type: ..., <fields>}``          one pool ``default`` with that provider
``resource_pools[].pool_name``                         ``resource_pools[].name`` (both accepted)
``resource_manager.default_compute_resource_pool``     ``default_resource_pool``
``instance_type.preemptible`` (GCP)                    means a Spot VM (same field, kept)
other Determined master keys (``port``, ``db``, ...)   ignored, with a warning each
provider ``launch_error_timeout``                      ignored, with a warning
=====================================================  =========================================

Everything else keeps Determined's name and meaning. The conversion works on the plain mapping
before validation and returns the paths it moved, so a problem is reported where the user
wrote it (``provisioner.region``), not where we moved it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.domain.config.errors import Problem

# Determined master settings Corral has no use for: there is no master to configure.
IGNORED_TOP_LEVEL = frozenset(
    {
        "additional_resource_managers", "cache", "checkpoint_storage", "cluster_name",
        "config_file", "db", "enable_cors", "feature_switches", "hpimportance",
        "initial_user_password", "integrations", "internal", "log", "logging",
        "notebook_timeout", "observability", "port", "profiling", "reserved_ports",
        "resource_manager", "root", "scheduler", "security", "task_container_defaults",
        "telemetry", "tensorboard_timeout", "tls", "webhooks",
    }
)  # fmt: skip
IGNORED_POOL_KEYS = frozenset(
    {
        "agent_reattach_enabled", "agent_reconnect_wait", "kubernetes_namespace",
        "max_aux_containers_per_agent", "max_cpu_containers_per_agent", "scheduler",
        "task_container_defaults",
    }
)  # fmt: skip
IGNORED_PROVIDER_KEYS = frozenset(
    {"agent_fluent_image", "launch_error_timeout", "master_cert_name"}
)

_HINTS = {
    "checkpoint_storage": "set checkpoint_storage in each experiment config",
    "launch_error_timeout": (
        "Corral never leaves a pool stopped: launch errors back it off (30 min at most) "
        "and an open boot breaker lets a launch through after an hour"
    ),
    "scheduler": "Corral's scheduler has no settings",
    "task_container_defaults": "set environment and bind_mounts in each experiment config",
}


@dataclass
class Normalized:
    """The mapping in Corral's shape, what was ignored, and where moved fields came from."""

    data: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    moved: list[tuple[str, str]] = field(default_factory=list)  # (new prefix, original prefix)
    # Problems found while converting; validation goes on and reports them with the rest.
    problems: list[Problem] = field(default_factory=list)
    # A Determined block stood for the pools but could not be read: "resource_pools: required"
    # would only repeat that problem.
    pools_reported: bool = False

    def original_path(self, path: str) -> str:
        for new, old in self.moved:
            if path == new or path.startswith((new + ".", new + "[")):
                return old + path[len(new) :]
        return path


def _ignored(path: str, key: str) -> str:
    hint = _HINTS.get(key, "Determined setting with no Corral equivalent")
    return f"{path}: ignored ({hint})"


def normalize_cluster(data: Mapping[str, Any]) -> Normalized:
    """Convert a Determined/PEDL ``master.yaml`` mapping; a Corral config passes unchanged."""
    out = Normalized(data=dict(data))
    d = out.data
    for key in ("provisioner", "provider"):
        if key not in d:
            continue
        block = d.pop(key)
        if "resource_pools" in d:
            out.problems.append(Problem(key, "cannot be combined with resource_pools"))
            continue
        if not isinstance(block, Mapping):
            out.problems.append(Problem(key, "must be a mapping"))
            out.pools_reported = True
            continue
        provider = dict(block)
        if key == "provisioner":
            # PEDL: flat block where `provider: aws` names the cloud.
            if "provider" in provider:
                provider["type"] = provider.pop("provider")
            out.moved.append(("resource_pools[0].provider.type", "provisioner.provider"))
        out.moved.append(("resource_pools[0].provider", key))
        out.moved.append(("resource_pools[0]", key))
        d["resource_pools"] = [{"name": "default", "provider": provider}]
        out.warnings.append(f"{key}: read as resource pool 'default' (Determined spelling)")
    _resource_manager(d, out)
    for key in sorted(set(d) & IGNORED_TOP_LEVEL):
        out.warnings.append(_ignored(key, key))
        del d[key]
    pools = d.get("resource_pools")
    if isinstance(pools, list):
        d["resource_pools"] = [_pool(i, p, out) for i, p in enumerate(pools)]
    return out


def _resource_manager(d: dict[str, Any], out: Normalized) -> None:
    rm = d.pop("resource_manager", None)
    if not isinstance(rm, Mapping):
        return
    rm = dict(rm)
    compute = rm.pop("default_compute_resource_pool", None)
    if isinstance(compute, str) and "default_resource_pool" not in d:
        d["default_resource_pool"] = compute
        out.moved.append(
            ("default_resource_pool", "resource_manager.default_compute_resource_pool")
        )
    if rm.get("type", "agent") == "agent":
        rm.pop("type", None)
    for key in sorted(rm):
        out.warnings.append(_ignored(f"resource_manager.{key}", key))


def _pool(index: int, pool: object, out: Normalized) -> object:
    if not isinstance(pool, Mapping):
        return pool
    pool = dict(pool)
    for key in sorted(set(pool) & IGNORED_POOL_KEYS):
        out.warnings.append(_ignored(f"resource_pools[{index}].{key}", key))
        del pool[key]
    provider = pool.get("provider")
    if isinstance(provider, Mapping):
        provider = dict(provider)
        for key in sorted(set(provider) & IGNORED_PROVIDER_KEYS):
            prefix = out.original_path(f"resource_pools[{index}].provider")
            out.warnings.append(_ignored(f"{prefix}.{key}", key))
            del provider[key]
        pool["provider"] = provider
    return pool


def problems_at_original_paths(problems: list[Problem], norm: Normalized) -> list[Problem]:
    """The conversion's problems, then the validation ``problems`` where the user wrote them."""
    moved = [Problem(norm.original_path(p.path), p.reason) for p in problems]
    if norm.pools_reported:
        moved = [p for p in moved if p != Problem("resource_pools", "required")]
    return [*norm.problems, *moved]
