"""Pure functions that turn a launch request and a pool's GCP block into an ``instances.insert``.

Kept apart from the client calls so the exact body is easy to read and test, and so
importing it costs nothing (no google-cloud-compute). The body is REST JSON (camelCase), the
format ``base_config`` is written in (the seed's "REST Resource: instances").

Why ``instances.insert`` and not ``bulkInsert``: Corral launches one instance per record,
each with its own idempotency token, which is exactly insert + ``requestId``. bulkInsert
takes ``InstanceProperties``, where ``machineType`` and ``acceleratorType`` are short names
and several Instance fields do not exist, so an Instance-shaped ``base_config`` would not
carry over; and with count 1 it buys nothing. The instance name is still
``<name_prefix>-<record suffix>``, as bulkInsert's name pattern would give.

``base_config`` precedence (deep merge, Corral's fields win):
1. Start from ``base_config``.
2. Maps merge key by key; for a key both set, Corral's value wins (so ``scheduling``,
   ``machineType``, ``networkInterfaces`` and ``serviceAccounts`` come from the pool block,
   while keys Corral never sets, e.g. ``minCpuPlatform``, ``shieldedInstanceConfig``,
   ``reservationAffinity``, pass through).
3. Three lists add up instead of being replaced: ``disks`` (a ``boot: true`` disk in
   base_config is merged *under* Corral's boot disk, e.g. to set ``diskType``; other disks
   are attached after it, as the seed's read-only data disk example needs),
   ``metadata.items`` (merged by key; ``startup-script`` is always Corral's) and
   ``tags.items`` (union).
4. Labels: base_config's, then the pool's ``labels``, then the ownership labels, which
   always win (a base_config cannot make an instance unmanageable or foreign-looking).
"""

from __future__ import annotations

import copy
import hashlib
import re
import uuid
from typing import Any

from corral.bootstrap.render import (
    BootstrapSettings,
    check_script_size,
    launch_script,
    settings_for,
)
from corral.domain import catalog
from corral.domain.config.gcp import GcpInstanceType, GcpProvider
from corral.domain.errors import LaunchError
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.ports.cloud import LaunchRequest

# GCE allows 256 KB per metadata value and 512 KB for all metadata together.
STARTUP_SCRIPT_LIMIT = 256 * 1024
NAME_LIMIT = 63
# Fixed namespace: requestId = uuid5(namespace, token), the same token gives the same UUID.
REQUEST_ID_NAMESPACE = uuid.UUID("5b8f7c1e-3a52-4d1b-9e0a-6c2f1d0e7a43")
_NAME_OK = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_ADDITIVE_LISTS = {("disks",), ("metadata", "items"), ("tags", "items")}


def request_id(token: str) -> str:
    """GCE's ``requestId`` must be a UUID: a deterministic one derived from our token."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, token))


def start_request_id(token: str) -> str:
    """``instances.start``'s requestId: from the start's token, in a namespace of its own so
    that it can never collide with an insert's (a start may reuse a launch's token)."""
    return request_id(f"start/{token}")


def stop_request_id(name: str, last_start: str, last_stop: str) -> str:
    """``instances.stop``'s requestId, per instance and per boot: from the instance's
    ``lastStartTimestamp`` and ``lastStopTimestamp``. A stop retried before the VM moved is
    the same request; a stop after the VM was stopped (and started) again is a new one even
    while the restart is under way (GCE would answer a repeated id with the old, finished
    operation and stop nothing)."""
    return request_id(f"stop/{name}/{last_start}/{last_stop}")


def instance_name(name_prefix: str, record_id: str) -> str:
    """``<name_prefix>-<record suffix>``: one name per record (never per attempt), so a late
    first attempt and a retry can never both create an instance for the same record."""
    suffix = re.sub(r"[^a-z0-9-]+", "-", record_id.lower()).strip("-")
    name = f"{name_prefix}-{suffix}"
    if suffix != record_id or len(name) > NAME_LIMIT or not _NAME_OK.match(name):
        # Lossy or too long: keep what fits and add a hash of the true id (stays unique).
        digest = hashlib.sha256(record_id.encode()).hexdigest()[:10]
        room = NAME_LIMIT - len(name_prefix) - len(digest) - 2
        name = f"{name_prefix}-{suffix[:room].strip('-')}-{digest}".replace("--", "-")
    return name


def ownership_labels(provider: GcpProvider, request: LaunchRequest) -> dict[str, str]:
    for what, value in (("pool", request.pool), ("record id", request.record_id)):
        if not _LABEL_VALUE.match(value):
            raise LaunchError.invalid_config(
                "invalid",
                f"{what} {value!r} is not a valid GCP label value",
            )
    return {
        provider.label_key: provider.label_value,
        POOL_TAG: request.pool,
        RECORD_TAG: request.record_id,
    }


def offering_name(machine_type: str, gpu_type: str | None, gpu_num: int) -> str:
    """The offering's ``instance_type`` as ``GcpInstanceType.offering_name`` spells it, from
    what a listed instance shows (its machine type and attached accelerators)."""
    machine = catalog.lookup_gcp_machine(machine_type)
    if not gpu_type or not gpu_num or (machine is not None and machine.gpus):
        return machine_type
    return f"{machine_type}+{gpu_num}x{gpu_type}"


def _scheduling(provider: GcpProvider, entry: GcpInstanceType, spot: bool) -> dict[str, Any]:
    # GPUs cannot live-migrate: GCE refuses MIGRATE for instances with accelerators.
    maintenance = "TERMINATE" if entry.gpus or spot else "MIGRATE"
    if not spot:
        return {"onHostMaintenance": maintenance, "automaticRestart": True}
    if entry.preemptible and not provider.spot:
        # Determined's legacy flag. A preempted VM is left TERMINATED (stopped); reconcile
        # deletes it (an instance that stopped without Corral asking is terminated), as
        # Determined does.
        return {"preemptible": True, "onHostMaintenance": "TERMINATE", "automaticRestart": False}
    # A warm pool (``LaunchRequest.stoppable``) needs nothing different here: unlike an EC2
    # spot instance, a Spot VM can be stopped and started by its owner whatever its
    # instanceTerminationAction, which only says what a *preemption* does. DELETE stays: a
    # preempted VM is gone and billed no more at once, and the reconciler replaces it; with
    # STOP it would linger stopped, still billed for its disk, and look like a warm instance.
    return {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",  # a preempted Spot VM stops billing at once
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }


def corral_body(
    provider: GcpProvider, request: LaunchRequest, startup_script: str
) -> dict[str, Any]:
    """What Corral itself sets on the instance (before ``base_config`` is merged in)."""
    check_script_size(
        startup_script,
        STARTUP_SCRIPT_LIMIT,
        "StartupScriptTooLarge",
        "startup-script is {size} bytes, GCE allows 256 KB",
    )
    offering, zone = request.offering, request.offering.location
    if zone not in provider.zone:
        raise LaunchError.invalid_config("invalid", f"zone {zone!r} is not a zone of this pool")
    try:
        entry = provider.instance_type_for(offering.instance_type)
    except KeyError:
        raise LaunchError.invalid_config(
            "invalid",
            f"{offering.instance_type!r} is not an instance_type of this pool",
        ) from None
    labels = {**provider.labels, **ownership_labels(provider, request)}
    nic: dict[str, Any] = {"network": provider.network_interface.network}
    if provider.network_interface.subnetwork:
        nic["subnetwork"] = provider.network_interface.subnetwork
    if provider.network_interface.external_ip:
        nic["accessConfigs"] = [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]
    body: dict[str, Any] = {
        "name": instance_name(provider.name_prefix, request.record_id),
        "machineType": f"zones/{zone}/machineTypes/{entry.machine_type}",
        "labels": labels,
        "metadata": {"items": [{"key": "startup-script", "value": startup_script}]},
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "type": "PERSISTENT",
                "initializeParams": {
                    "sourceImage": provider.boot_disk_source_image,
                    "diskSizeGb": str(provider.boot_disk_size),
                    "labels": labels,
                },
            }
        ],
        "networkInterfaces": [nic],
        "serviceAccounts": [
            {
                "email": provider.service_account.email or "default",
                "scopes": list(provider.service_account.scopes),
            }
        ],
        "scheduling": _scheduling(provider, entry, offering.is_spot),
    }
    if provider.network_tags:
        body["tags"] = {"items": list(provider.network_tags)}
    if provider.boot_disk_type:
        body["disks"][0]["initializeParams"]["diskType"] = (
            f"zones/{zone}/diskTypes/{provider.boot_disk_type}"
        )
    machine = catalog.lookup_gcp_machine(entry.machine_type)
    if entry.gpu_type and entry.gpu_num and not (machine is not None and machine.gpus):
        body["guestAccelerators"] = [
            {
                "acceleratorType": f"zones/{zone}/acceleratorTypes/{entry.gpu_type}",
                "acceleratorCount": entry.gpu_num,
            }
        ]
    return body


def _merge(base: Any, ours: Any, path: tuple[str, ...]) -> Any:
    if isinstance(base, dict) and isinstance(ours, dict):
        merged = dict(base)
        for key, value in ours.items():
            merged[key] = _merge(base[key], value, (*path, key)) if key in base else value
        return merged
    if isinstance(base, list) and isinstance(ours, list) and path in _ADDITIVE_LISTS:
        return _merge_list(base, ours, path)
    return ours


def _merge_list(base: list[Any], ours: list[Any], path: tuple[str, ...]) -> list[Any]:
    if path == ("tags", "items"):
        return list(dict.fromkeys([*base, *ours]))
    if path == ("metadata", "items"):
        by_key = {i.get("key"): i for i in base if isinstance(i, dict)}
        by_key.update({i["key"]: i for i in ours})
        return list(by_key.values())
    # disks: our boot disk with base_config's boot disk under it, then base's other disks.
    base_boot = [d for d in base if isinstance(d, dict) and d.get("boot")]
    others = [d for d in base if not (isinstance(d, dict) and d.get("boot"))]
    boot = _merge(base_boot[0], ours[0], ("disk",)) if base_boot else ours[0]
    return [boot, *ours[1:], *others]


def insert_body(
    provider: GcpProvider, request: LaunchRequest, startup_script: str
) -> dict[str, Any]:
    """The complete ``instances.insert`` body for one launch attempt."""
    body = _merge(
        copy.deepcopy(provider.base_config), corral_body(provider, request, startup_script), ()
    )
    if not isinstance(body, dict):
        raise LaunchError.invalid_config("BaseConfigInvalid", "not a mapping")
    return body


def bootstrap_settings(
    provider: GcpProvider, request: LaunchRequest, default_api_url: str | None = None
) -> BootstrapSettings:
    """What the agent on this instance needs, from the pool's block and the launch. The agent
    proves itself with its instance identity token (auth "gce")."""
    return settings_for(
        provider,
        pool=request.pool,
        record_id=request.record_id,
        expected_gpus=request.offering.slots,
        auth="gce",
        default_api_url=default_api_url,
    )


def render_startup_script(
    provider: GcpProvider, request: LaunchRequest, default_api_url: str | None = None
) -> str:
    return launch_script(
        lambda: bootstrap_settings(provider, request, default_api_url),
        STARTUP_SCRIPT_LIMIT,
        "StartupScriptTooLarge",
    )
