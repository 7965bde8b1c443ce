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
