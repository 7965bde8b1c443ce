"""Reading Determined's (and PEDL's) ``master.yaml`` as a Corral cluster config.

The rename table (also in docs/configuration.md):

=====================================================  =========================================
Determined / PEDL                                      Corral
=====================================================  =========================================
``provisioner: {provider: aws, <fields>}`` (PEDL)      one pool ``default`` whose provider block
                                                       is ``{type: aws, <fields>}``
top-level ``provider: {type: ..., <fields>}``          one pool ``default`` with that provider
``resource_pools[].pool_name``                         ``resource_pools[].name`` (both accepted)
``resource_manager.default_compute_resource_pool``     ``default_resource_pool`` (also the older
                                                       ``default_gpu_resource_pool``)
``instance_type.preemptible`` (GCP)                    means a Spot VM (same field, kept)
``task_container_defaults`` (top level, per pool)      port ranges, ``image`` and
                                                       ``registry_auth`` kept (task_defaults.py);
                                                       other keys ignored, with a warning each
provider ``agent_config_file_contents``                its proxies to ``agent_settings``, its
                                                       reconnect settings to the provider block
                                                       (determined.py); other keys ignored,
                                                       with a warning each
other Determined master keys (``port``, ``db``, ...)   ignored, with a warning each
provider ``launch_error_timeout``, ...                 ignored, with a warning each
=====================================================  =========================================

Provider values Determined reads differently (``""`` meaning unset, ``master_url`` hosts from
instance metadata, spot pools without on-demand fallback) are converted by ``determined.py``;
fields the deployment knows (region, project, zone, image) are filled by ``deployment.py``, and
the agents' identity settings by ``agent_identity.py``.
Everything else keeps Determined's name and meaning. The conversion works on the plain mapping
before validation and returns the paths it moved, so a problem is reported where the user
wrote it (``provisioner.region``), not where we moved it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.domain.config import determined
from corral.domain.config.agent_identity import check_identity
from corral.domain.config.deployment import DeploymentDefaults, fill_defaults
from corral.domain.config.errors import Problem
from corral.domain.config.task_defaults import KEPT_KEYS

# Determined master settings Corral has no use for: there is no master to configure.
IGNORED_TOP_LEVEL = frozenset(
    {
        "__internal", "additional_resource_managers", "cache", "checkpoint_storage",
        "cluster_name", "config_file", "db", "det_cloud", "enable_cors", "feature_switches",
        "hpimportance", "initial_user_password", "integrations", "internal", "launch_error",
        "log", "logging", "notebook_timeout", "observability", "oidc", "port", "profiling",
        "reserved_ports", "resource_manager", "retention_policy", "root", "saml", "scheduler",
        "scim", "security", "telemetry", "tensorboard_timeout", "tls", "ui_customization",
        "webhooks",
    }
)  # fmt: skip
IGNORED_POOL_KEYS = frozenset(
    {
        "agent_reattach_enabled", "agent_reconnect_wait", "kubernetes_namespace",
        "max_aux_containers_per_agent", "max_cpu_containers_per_agent", "scheduler",
    }
)  # fmt: skip
IGNORED_PROVIDER_KEYS = frozenset(
    {
        "agent_fluent_image", "cpu_slots", "launch_error_timeout", "master_cert_name",
        "use_cloud_logging",
    }
)  # fmt: skip

_HINTS = {
    "agent_fluent_image": "Corral's agents ship trial logs to the control plane themselves",
    "checkpoint_storage": "set checkpoint_storage in each experiment config",
    "cpu_slots": (
        "not a Determined field: its GCP render writes it and Determined ignores it; "
        "cpu_slots_allowed is the setting"
    ),
    "launch_error": (
        "Determined master setting; a Corral launch that keeps failing fails its record after "
        "launch_error_retries"
    ),
    "launch_error_timeout": (
        "Corral never leaves a pool stopped: launch errors back it off (30 min at most) "
        "and an open boot breaker lets a launch through after an hour"
    ),
    "scheduler": "Corral's scheduler has no settings",
    "task_container_defaults": (
        "Corral reads only gloo_port_range, nccl_port_range, image and registry_auth here; "
        "set the environment and bind_mounts in each experiment config"
    ),
    "use_cloud_logging": (
        "trial logs are kept by the control plane (corral trial logs); Corral's agents have no "
        "Cloud Logging driver"
    ),
}
# Keys that make a document a Determined master.yaml (not a Corral cluster config).
_DETERMINED_MARKS = IGNORED_TOP_LEVEL | {"provisioner", "provider"}
TASK_DEFAULTS = "task_container_defaults"  # Corral keeps some keys (task_defaults.py)


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
    # Why a field the deployment could have filled is required (replaces a bare "required").
    required_because: dict[str, str] = field(default_factory=dict)

    def original_path(self, path: str) -> str:
        for new, old in self.moved:
            if path == new or path.startswith((new + ".", new + "[")):
                return old + path[len(new) :]
        return path


def _ignored(path: str, key: str) -> str:
    hint = _HINTS.get(key, "Determined setting with no Corral equivalent")
    return f"{path}: ignored ({hint})"


def is_determined(data: Mapping[str, Any]) -> bool:
    """A Determined master.yaml: a master key, a ``provisioner``/``provider`` block, or pools
    named with ``pool_name``."""
    pools = data.get("resource_pools")
    named = isinstance(pools, list) and any(
        isinstance(p, Mapping) and "pool_name" in p for p in pools
    )
    return named or bool(set(data) & _DETERMINED_MARKS)


def normalize_cluster(
    data: Mapping[str, Any], defaults: DeploymentDefaults | None = None
) -> Normalized:
    """Convert a Determined/PEDL ``master.yaml`` mapping; a Corral config passes unchanged but
    for the deployment's ``defaults`` and unset (``""``/``null``) provider values."""
    out = Normalized(data=dict(data))
    d = out.data
    imported = is_determined(data)
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
    if imported:
        _task_defaults(d, TASK_DEFAULTS, out)
    for key in sorted(set(d) & IGNORED_TOP_LEVEL):
        out.warnings.append(_ignored(key, key))
        del d[key]
    pools = d.get("resource_pools")
    if isinstance(pools, list):
        context = _Context(defaults or DeploymentDefaults(), imported)
        d["resource_pools"] = [_pool(i, p, out, context) for i, p in enumerate(pools)]
    return out


@dataclass(frozen=True)
class _Context:
    defaults: DeploymentDefaults
    imported: bool  # the document is a Determined master.yaml


def _resource_manager(d: dict[str, Any], out: Normalized) -> None:
    rm = d.pop("resource_manager", None)
    if not isinstance(rm, Mapping):
        return
    rm = dict(rm)
    for key in ("default_compute_resource_pool", "default_gpu_resource_pool"):
        compute = rm.pop(key, None)
        if isinstance(compute, str) and "default_resource_pool" not in d:
            d["default_resource_pool"] = compute
            out.moved.append(("default_resource_pool", f"resource_manager.{key}"))
    if rm.get("type", "agent") == "agent":
        rm.pop("type", None)
    for key in sorted(rm):
        out.warnings.append(_ignored(f"resource_manager.{key}", key))


def _task_defaults(holder: dict[str, Any], path: str, out: Normalized) -> None:
    """Keep a Determined ``task_container_defaults`` block's keys Corral reads; drop the others
    (with a warning each), and the block when nothing is left. A Corral config is not
    filtered: there an unknown key is a typo to report."""
    block = holder.get(TASK_DEFAULTS)
    if block is None:
        holder.pop(TASK_DEFAULTS, None)
        return
    if not isinstance(block, Mapping):
        return  # validation says it must be a mapping
    kept = {k: v for k, v in block.items() if k in KEPT_KEYS and v not in (None, "")}
    for key in sorted(set(block) - set(kept), key=str):
        if key in KEPT_KEYS:
            continue  # "" or null: unset, as Determined reads it
        out.warnings.append(_ignored(f"{path}.{key}", TASK_DEFAULTS))
    if kept:
        holder[TASK_DEFAULTS] = kept
    else:
        del holder[TASK_DEFAULTS]


def _pool(index: int, pool: object, out: Normalized, context: _Context) -> object:
    if not isinstance(pool, Mapping):
        return pool
    pool = dict(pool)
    for key in sorted(set(pool) & IGNORED_POOL_KEYS):
        out.warnings.append(_ignored(f"resource_pools[{index}].{key}", key))
        del pool[key]
    if context.imported:
        _task_defaults(pool, f"resource_pools[{index}].{TASK_DEFAULTS}", out)
    provider = pool.get("provider")
    if isinstance(provider, Mapping):
        provider = dict(provider)
        at = f"resource_pools[{index}].provider"
        prefix = out.original_path(at)
        for key in sorted(set(provider) & IGNORED_PROVIDER_KEYS):
            out.warnings.append(_ignored(f"{prefix}.{key}", key))
            del provider[key]
        determined.drop_unset(provider)
        out.warnings += determined.agent_config_contents(provider, prefix)
        out.warnings += determined.metadata_master_url(provider, prefix)
        out.warnings += determined.log_stream_note(provider, prefix)
        out.warnings += determined.unused_agent_image(provider, prefix)
        if context.imported:
            out.warnings += determined.keep_spot_only(provider, prefix)
        filled = fill_defaults(provider, prefix, context.defaults)
        out.warnings += filled.warnings
        out.warnings += check_identity(provider, prefix, context.defaults)
        for key, reason in filled.missing.items():
            out.required_because[f"{at}.{key}"] = reason
        pool["provider"] = provider
    return pool


def problems_at_original_paths(problems: list[Problem], norm: Normalized) -> list[Problem]:
    """The conversion's problems, then the validation ``problems`` where the user wrote them."""
    moved = [
        Problem(
            norm.original_path(p.path),
            norm.required_because.get(p.path, p.reason) if p.reason == "required" else p.reason,
        )
        for p in problems
    ]
    if norm.pools_reported:
        moved = [p for p in moved if p != Problem("resource_pools", "required")]
    return [*norm.problems, *moved]
