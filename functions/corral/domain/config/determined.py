"""Provider values that Determined reads differently from how Corral would read them as written.

Each function takes one provider block (a mutable mapping, before validation) and the path the
user wrote it at, changes the block so Corral does what Determined would, and returns a warning
per change. The rename table in docs/configuration.md lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

# master_url hosts Determined resolves from the master's instance metadata (EC2 or GCE).
METADATA_HOSTS = frozenset(
    {"local-ipv4", "public-ipv4", "local-hostname", "public-hostname", "internal-ip", "external-ip"}
)
_NESTED = ("network_interface", "service_account")


def _unset(value: object) -> bool:
    return value is None or value == ""


def drop_unset(provider: dict[str, Any]) -> None:
    """Determined's Go structs read ``""`` and ``null`` as "not set" (``spot_max_price: ""``,
    an empty ``subnet_id`` from a CloudFormation parameter): so does Corral, silently."""
    for key in [k for k, v in provider.items() if _unset(v)]:
        del provider[key]
    for key in _NESTED:
        nested = provider.get(key)
        if isinstance(nested, Mapping):
            provider[key] = {k: v for k, v in nested.items() if not _unset(v)}


def metadata_master_url(provider: dict[str, Any], path: str) -> list[str]:
    """``http://local-ipv4:8080`` names the master by instance metadata: the agents of a
    Corral pool reach the deployment's API instead (the pool has no master_url)."""
    url = provider.get("master_url")
    if not isinstance(url, str):
        return []
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return []  # not a URL at all: validation says so
    if host not in METADATA_HOSTS:
        return []
    del provider["master_url"]
    return [
        f"{path}.master_url: {url!r} names Determined's master by instance metadata ({host}); "
        "Corral's agents use the deployment's own API URL instead (CORRAL_API_URL)"
    ]


def _true(value: object) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def is_spot(provider: Mapping[str, Any]) -> bool:
    shapes = provider.get("instance_type")
    if isinstance(shapes, Mapping):
        shapes = [shapes]
    preemptible = isinstance(shapes, list) and any(
        isinstance(s, Mapping) and _true(s.get("preemptible")) for s in shapes
    )
    return _true(provider.get("spot")) or preemptible


def keep_spot_only(provider: dict[str, Any], path: str) -> list[str]:
    """Determined never launches on-demand capacity for a spot pool; Corral's default would.
    An imported spot pool keeps Determined's behaviour unless its block opts in."""
    if not is_spot(provider) or any(k.startswith("on_demand_fallback") for k in provider):
        return []
    provider["on_demand_fallback"] = False
    return [
        f"{path}.on_demand_fallback: false (Determined's behaviour: a spot pool never launches "
        "on-demand instances); set it to true to let Corral fall back to on-demand when spot "
        "capacity is refused"
    ]


def log_stream_note(provider: Mapping[str, Any], path: str) -> list[str]:
    if provider.get("type") != "aws" or _unset(provider.get("log_stream")):
        return []
    return [
        f"{path}.log_stream: passed to the agents as cloudwatch_log_stream; Corral's agents "
        "copy trial logs to log_group in one stream per instance and trial, named "
        "<log_stream>/<instance-id>/<trial-id>, not in one shared stream"
    ]


def unused_agent_image(provider: Mapping[str, Any], path: str) -> list[str]:
    """Determined runs its agent from ``agent_docker_image``; Corral's agent runs from the
    machine image (or the wheel the bootstrap installs), so the image is not used."""
    image = provider.get("agent_docker_image")
    if _unset(image):
        return []
    return [
        f"{path}.agent_docker_image: not used ({image!r}); Corral's agent runs from the machine "
        "image (image_id / boot_disk_source_image) or the agent wheel the bootstrap installs"
    ]


# Determined's agent settings (its agent.yaml, ``agent_config_file_contents`` per pool) that
# Corral's agent also has: the proxies go to the pool's ``agent_settings``, the reconnect
# settings to the provider block (where Corral and Determined's master.yaml keep them).
AGENT_SETTINGS_KEYS = ("http_proxy", "https_proxy", "no_proxy")
PROVIDER_KEYS = ("agent_reconnect_attempts", "agent_reconnect_backoff")
_AGENT_KEY_HINTS = {
    "hooks": (
        "Corral's dead man's switch shuts an instance down after dead_man_switch_s without the "
        "control plane"
    ),
    "ftp_proxy": "Corral's agents and trials are given http_proxy, https_proxy and no_proxy only",
    "container_master_host": "trials reach the API through the agent's api_url",
    "container_master_port": "trials reach the API through the agent's api_url",
    "master_host": "the agents reach the deployment's API (master_url, CORRAL_API_URL)",
    "master_port": "the agents reach the deployment's API (master_url, CORRAL_API_URL)",
    "resource_pool": "the pool is the one that launched the instance",
    "security": "the agents use the API's HTTPS and sign their requests with the instance identity",
}


def agent_config_contents(provider: dict[str, Any], path: str) -> list[str]:
    """Map Determined's ``agent_config_file_contents`` to Corral's fields; a warning for each
    key that has no Corral meaning, or whose Corral field the block sets already."""
    contents = provider.pop("agent_config_file_contents", None)
    at = f"{path}.agent_config_file_contents"
    if contents is None or contents == {}:
        return []
    if not isinstance(contents, Mapping):
        return [f"{at}: ignored (not a mapping of Determined agent settings)"]
    warnings: list[str] = []
    settings = provider.get("agent_settings")
    settings = dict(settings) if isinstance(settings, Mapping) else {}
    for key, value in contents.items():
        where = f"{at}.{key}"
        if key in AGENT_SETTINGS_KEYS or key in PROVIDER_KEYS:
            holder, target = (
                (settings, f"agent_settings.{key}")
                if key in AGENT_SETTINGS_KEYS
                else (provider, key)
            )
            if _unset(value):
                continue
            if key in holder:
                warnings.append(f"{where}: ignored ({path}.{target} is set)")
                continue
            holder[key] = value
            warnings.append(f"{where}: read as {path}.{target}")
            continue
        hint = _AGENT_KEY_HINTS.get(str(key), "Determined agent setting with no Corral equivalent")
        warnings.append(f"{where}: ignored ({hint})")
    if settings:
        provider["agent_settings"] = settings
    return warnings
