"""GceProvider: the CloudProvider port on Compute Engine (Spot, legacy preemptible, on-demand).

Ownership is the first invariant: an instance is ours only when it carries the pool's
``label_key=label_value`` *and* a pool label. Listings ask GCE for our label (an
``aggregatedList`` per project and label pair: every zone in one call, including zones a
pool no longer names, so nothing launched earlier can leak) and re-check the labels
client-side. ``terminate`` deletes only instances such a listing has just confirmed.

Launches: ``instances.insert`` with ``requestId`` = a UUID derived from the launch token
(GCE dedupes a repeated requestId for at least an hour) and a name fixed per record, then a
bounded wait on the zone operation, because GCE reports stockouts and most quota errors in
the finished operation, not in the HTTP reply. An operation still running after
``max_wait_s`` is returned as a launch (the name is known): if it fails later, the instance
never appears and reconcile marks the record gone.

The warm pool: ``stop`` (``instances.stop``) and ``start`` (``instances.start``), never
suspend and resume, because Compute Engine cannot suspend a VM with GPUs attached. A stopped
VM (GCE says TERMINATED) keeps its boot disk and labels and bills only for its disks; start
boots it afresh (the startup script runs again, the agent registers again). Both act only on
instances a listing has just shown to be ours; both send a ``requestId``.

A VM being deleted passes through STOPPING (and may show TERMINATED) just like one being
stopped. Listings tell them apart by the zone's delete operations still running: a VM with
one is reported TERMINATING (gone), never STOPPING / STOPPED, so it is never taken for a
warm instance.

GCE has no spot requests: Spot VMs are instances. ``list_spot_requests`` is empty and
``cancel_spot_requests`` does nothing.

``google-cloud-compute`` (~1.3 s to import) is imported on the first call.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from datetime import datetime
from typing import Any

from corral.adapters.gcp import gce_params
from corral.adapters.gcp.gce_errors import (
    launch_error_from_api,
    launch_error_from_operation,
    our_error,
)
from corral.adapters.provider_pools import cloud_pools
from corral.domain.config.cluster import ClusterConfig
from corral.domain.config.gcp import GcpProvider
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.ports.clock import Clock, SystemClock
from corral.ports.cloud import CloudInstance, CloudState, LaunchRequest, LaunchResult, SpotRequest

log = logging.getLogger(__name__)

StartupScriptRenderer = Callable[[GcpProvider, LaunchRequest], str]

# GCE's TERMINATED means stopped (the disk, the labels and the resource remain); deleted
# instances vanish from listings, and while a delete runs the listing reports TERMINATING
# whatever this table says (see ``_deletions``). The reconciler keeps a warm pool's stopped
# instances and deletes the others.
GCE_STATES: Mapping[str, CloudState] = {
    "PENDING": CloudState.PENDING,  # a Flex-start VM waiting for capacity
    "PROVISIONING": CloudState.PENDING,
    "STAGING": CloudState.PENDING,
    "RUNNING": CloudState.RUNNING,
    "REPAIRING": CloudState.PENDING,
    "PENDING_STOP": CloudState.STOPPING,  # graceful shutdown before a stop (or a delete)
    "STOPPING": CloudState.STOPPING,
    "SUSPENDING": CloudState.STOPPING,
    "SUSPENDED": CloudState.STOPPED,
    "TERMINATED": CloudState.STOPPED,
}
# Statuses a VM being deleted shows as well: only for these are delete operations looked up.
_AMBIGUOUS = frozenset({"PENDING_STOP", "STOPPING", "TERMINATED"})
# ``start`` confirms these as they are (up or on the way up) ...
_UP = frozenset({"PENDING", "PROVISIONING", "STAGING", "RUNNING", "REPAIRING"})
# ... and answers THROTTLED for these (on the way down: start once it is down).
_GOING_DOWN = frozenset({"PENDING_STOP", "STOPPING", "SUSPENDING"})
# ``stop`` confirms these without a call: stopped or stopping already.
_STOPPED = frozenset({"PENDING_STOP", "STOPPING", "TERMINATED"})
_RUNNING_DELETES = '(operationType = "delete") (status != "DONE")'
_INSTANCE_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # safe to put in a filter
PAGE_SIZE = 500


def _short(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def _timestamp(value: str, default: float) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return default


class GceProvider:
    """Implements ``corral.ports.cloud.CloudProvider`` for the ``type: gcp`` pools.

    ``instances`` / ``operations``: ready ``InstancesClient`` / ``ZoneOperationsClient``
    (tests); otherwise built on first use from ``client_options`` and ``credentials``
    (None: Application Default Credentials), over REST.
    """

    def __init__(
        self,
        config: ClusterConfig | Mapping[str, GcpProvider],
        *,
        instances: Any = None,
        operations: Any = None,
        client_options: Mapping[str, Any] | None = None,
        credentials: Any = None,
        clock: Clock | None = None,
        startup_script: StartupScriptRenderer | None = None,
        max_wait_s: float = 90.0,
        monotonic: Callable[[], float] = time.monotonic,
        api_url: str | None = None,
    ) -> None:
        self._pools = cloud_pools(config, GcpProvider)
        # One listing per (project, label pair) covers every pool sharing it.
        self._scopes = sorted(
            {(p.project, p.label_key, p.label_value) for p in self._pools.values()}
        )
        self._instances = instances
        self._operations = operations
        self._client_options = dict(client_options or {})
        self._credentials = credentials
        self._clock: Clock = clock or SystemClock()
        # Agents of pools without a master_url reach the control plane at ``api_url``.
        self._startup_script = startup_script or (
            lambda provider, request: gce_params.render_startup_script(provider, request, api_url)
        )
        self._max_wait_s = max_wait_s
        self._monotonic = monotonic

    # ---- clients --------------------------------------------------------------------
    def _clients(self) -> tuple[Any, Any]:
        if self._instances is None or self._operations is None:
            from google.cloud import compute_v1

            kwargs: dict[str, Any] = {"transport": "rest", "credentials": self._credentials}
            if self._client_options:
                kwargs["client_options"] = self._client_options
            if self._instances is None:
                self._instances = compute_v1.InstancesClient(**kwargs)
            if self._operations is None:
                self._operations = compute_v1.ZoneOperationsClient(**kwargs)
        return self._instances, self._operations

    # ---- the port -------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> LaunchResult:
        from google.api_core import exceptions
        from google.cloud import compute_v1
        from google.protobuf import json_format

        provider = self._pools.get(request.pool)
        if provider is None:
            raise LaunchError(
                LaunchErrorClass.INVALID_CONFIG, "UnknownPool", f"no GCP pool {request.pool!r}"
            )
        body = gce_params.insert_body(provider, request, self._startup_script(provider, request))
        try:
            resource = compute_v1.Instance.from_json(_json(body), ignore_unknown_fields=False)
        except json_format.ParseError as error:
            raise LaunchError(
                LaunchErrorClass.INVALID_CONFIG, "BaseConfigInvalid", f"base_config: {error}"
            ) from error
        zone = request.offering.location
        instances, _ = self._clients()
        try:
            operation = instances.insert_unary(
                request=compute_v1.InsertInstanceRequest(
                    project=provider.project,
                    zone=zone,
                    instance_resource=resource,
                    request_id=gce_params.request_id(request.token),
                )
            )
        except exceptions.Conflict:
            # The name is taken: an earlier attempt for this record got through after all.
            return self._existing(provider, zone, body["name"], request)
        except exceptions.GoogleAPICallError as error:
            raise launch_error_from_api(error) from error
        except exceptions.RetryError as error:
            raise LaunchError(LaunchErrorClass.THROTTLED, "RetryError", str(error)) from error
        self._wait(provider, zone, operation)
        return LaunchResult(body["name"], None, self._clock.now())

    def _wait(self, provider: GcpProvider, zone: str, operation: Any) -> None:
        """Wait (bounded) for the insert operation; raise its error if it ends in one."""
        from google.api_core import exceptions

        _, operations = self._clients()
        limit = min(self._max_wait_s, provider.operation_timeout_period)
        deadline = self._monotonic() + limit
        while _status(operation) != "DONE" and self._monotonic() < deadline:
            try:  # ``wait`` returns when done or after ~2 minutes, whichever is first
                operation = operations.wait(
                    project=provider.project, zone=zone, operation=operation.name
                )
            except exceptions.GoogleAPICallError:
                return  # cannot see the operation: reconcile will see the instance, or not
        error = launch_error_from_operation(operation)
        if error is not None:
            raise error

    def _existing(
        self, provider: GcpProvider, zone: str, name: str, request: LaunchRequest
    ) -> LaunchResult:
        from google.api_core import exceptions

        instances, _ = self._clients()
        try:
            found = instances.get(project=provider.project, zone=zone, instance=name)
        except exceptions.GoogleAPICallError as error:
            raise launch_error_from_api(error) from error
        labels = dict(found.labels)
        ours = labels.get(provider.label_key) == provider.label_value
        if not ours or labels.get(RECORD_TAG) != request.record_id:
            raise LaunchError(
                LaunchErrorClass.INVALID_CONFIG,
                "InstanceNameTaken",
                f"instance {name} in {zone} exists and is not this record's",
            )
        created = _timestamp(str(found.creation_timestamp), self._clock.now())
        return LaunchResult(name, None, created)

    def list_owned(self) -> list[CloudInstance]:
        found: dict[str, CloudInstance] = {}
        for _, instance, deleting in self._owned():
            found.setdefault(instance.name, self._to_cloud_instance(instance, deleting))
        return list(found.values())

    def list_spot_requests(self) -> list[SpotRequest]:
        return []  # GCE has no spot requests: a Spot VM is an instance

    def terminate(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        from google.api_core import exceptions

        wanted = set(cloud_ids)
        confirmed: set[str] = set()
        if not wanted:
            return frozenset()
        instances, _ = self._clients()
        for project, key, value in self._scopes:
            for instance in self._aggregated(project, key, value):
                if instance.name not in wanted:
                    continue
                # Not waited on: deletion takes a minute; the next listing shows it going.
                # NotFound: it went since we listed it (ours, so confirmed all the same).
                with contextlib.suppress(exceptions.NotFound):
                    instances.delete_unary(
                        project=project, zone=_short(instance.zone), instance=instance.name
                    )
                wanted.discard(instance.name)
                confirmed.add(instance.name)
        return frozenset(confirmed)

    def cancel_spot_requests(self, request_ids: Sequence[str]) -> None:
        return None  # nothing to cancel on GCE

    # ---- the warm pool ------------------------------------------------------------------
    # Stop and start, not suspend and resume: Compute Engine cannot suspend a VM that has
    # GPUs attached, while a stopped one keeps its disks (the agent image's cache, the
    # trial images it pulled) and bills only for them.
    def stop(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        wanted = set(cloud_ids)
        if not wanted:
            return frozenset()
        confirmed: set[str] = set()
        for project, instance, deleting in self._owned(wanted):
            # Being deleted is gone, not stopping: not confirmed.
            if not deleting and self._stop_one(project, instance):
                confirmed.add(instance.name)
        return frozenset(confirmed)

    def _stop_one(self, project: str, instance: Any) -> bool:
        """Stop one instance of ours (not waited on: the next listing shows it STOPPING or
        STOPPED). True when GCE confirms it stopping or stopped."""
        from google.api_core import exceptions
        from google.cloud import compute_v1

        if _status(instance) in _STOPPED:
            return True  # nothing to do: a second stop would only queue another operation
        name = str(instance.name)
        started = str(instance.last_start_timestamp or instance.creation_timestamp)
        request = compute_v1.StopInstanceRequest(
            project=project,
            zone=_short(instance.zone),
            instance=name,
            request_id=gce_params.stop_request_id(name, started, str(instance.last_stop_timestamp)),
        )
        if any(str(disk.type_) == "SCRATCH" for disk in instance.disks):
            # GCE refuses to stop a VM with local SSDs unless told what to do with them;
            # their content is scratch space, the warm pool keeps the boot disk.
            request.discard_local_ssd = True
        instances, _ = self._clients()
        try:
            instances.stop_unary(request=request)
        except exceptions.NotFound:
            return False  # deleted since it was listed: gone, not stopped
        except (exceptions.GoogleAPICallError, exceptions.RetryError) as error:
            # Not confirmed: the caller keeps its record STOPPING, reconcile settles it.
            log.warning("stopping %s: %s", name, error)
            return False
        return True

    def start(self, cloud_id: str, token: str) -> LaunchResult:
        from google.api_core import exceptions

        try:
            found = self._owned({cloud_id})
        except exceptions.GoogleAPICallError as error:
            raise launch_error_from_api(error) from error
        except exceptions.RetryError as error:
            raise LaunchError(LaunchErrorClass.THROTTLED, "RetryError", str(error)) from error
        if not found:
            raise our_error("InstanceNotFound", f"no instance {cloud_id} of ours")
        project, instance, deleting = found[0]
        status = _status(instance)
        if deleting:
            raise our_error("InstanceNotFound", f"instance {cloud_id} is being deleted")
        if status in _UP:  # started already (a repeated start): confirmed as it is
            started = str(instance.last_start_timestamp or instance.creation_timestamp)
            return LaunchResult(cloud_id, None, _timestamp(started, self._clock.now()))
        if status in _GOING_DOWN:
            raise our_error("InstanceStopping", f"instance {cloud_id} is {status}: retry soon")
        if status != "TERMINATED":
            raise our_error("InstanceNotStartable", f"instance {cloud_id} is {status}")
        return self._start(project, instance, token)

    def _start(self, project: str, instance: Any, token: str) -> LaunchResult:
        """``instances.start`` with a requestId from ``token``, then a bounded wait on the
        operation: a stockout (ZONE_RESOURCE_POOL_EXHAUSTED...) arrives in the finished
        operation, as for an insert, and leaves the VM stopped."""
        from google.api_core import exceptions
        from google.cloud import compute_v1

        zone, name = _short(instance.zone), str(instance.name)
        instances, _ = self._clients()
        try:
            operation = instances.start_unary(
                request=compute_v1.StartInstanceRequest(
                    project=project,
                    zone=zone,
                    instance=name,
                    request_id=gce_params.start_request_id(token),
                )
            )
        except exceptions.GoogleAPICallError as error:
            raise launch_error_from_api(error) from error
        except exceptions.RetryError as error:
            raise LaunchError(LaunchErrorClass.THROTTLED, "RetryError", str(error)) from error
        self._wait(self._provider_of(project, instance), zone, operation)
        return LaunchResult(name, None, self._clock.now())

    def _provider_of(self, project: str, instance: Any) -> GcpProvider:
        """The pool block an instance of ours was launched from (for its timeouts)."""
        pool = self._pools.get(dict(instance.labels).get(POOL_TAG, ""))
        if pool is not None and pool.project == project:
            return pool
        return next(p for p in self._pools.values() if p.project == project)

    # ---- listing ----------------------------------------------------------------------
    def _owned(self, names: Set[str] | None = None) -> list[tuple[str, Any, bool]]:
        """(project, instance, being deleted) for each instance of ours, or of ``names``."""
        only = next(iter(names)) if names is not None and len(names) == 1 else None
        if only is not None and not _INSTANCE_NAME.fullmatch(only):
            only = None  # no GCE name (so not ours): the client-side check finds nothing
        found = [
            (project, instance)
            for project, key, value in self._scopes
            for instance in self._aggregated(project, key, value, only)
            if names is None or instance.name in names
        ]
        unsure = {(p, _short(i.zone)) for p, i in found if _status(i) in _AMBIGUOUS}
        deleting = self._deletions(unsure) if unsure else set()
        return [(p, i, (p, _short(i.zone), i.name) in deleting) for p, i in found]

    def _deletions(self, zones: Set[tuple[str, str]]) -> set[tuple[str, str, str]]:
        """(project, zone, name) of the instances a delete operation is still running on, in
        ``zones`` (project, zone). If GCE will not say, the listing shows the VM's status."""
        from google.api_core import exceptions
        from google.cloud import compute_v1

        _, operations = self._clients()
        found: set[tuple[str, str, str]] = set()
        for project, zone in sorted(zones):
            request = compute_v1.ListZoneOperationsRequest(
                project=project, zone=zone, filter=_RUNNING_DELETES, max_results=PAGE_SIZE
            )
            try:
                for operation in operations.list(request=request):
                    # Re-checked: the filter is a convenience, not a guarantee.
                    if operation.operation_type == "delete" and _status(operation) != "DONE":
                        found.add((project, zone, _short(operation.target_link)))
            except (exceptions.GoogleAPICallError, exceptions.RetryError) as error:
                log.warning("listing delete operations in %s/%s: %s", project, zone, error)
        return found

    def _aggregated(
        self, project: str, key: str, value: str, name: str | None = None
    ) -> Iterator[Any]:
        """Our instances in every zone of ``project`` (by label, re-checked here); only the
        one called ``name`` when given."""
        from google.cloud import compute_v1

        instances, _ = self._clients()
        clauses = f'(labels.{key} = "{value}")'
        if name is not None:
            clauses += f' (name = "{name}")'
        request = compute_v1.AggregatedListInstancesRequest(
            project=project,
            filter=clauses,
            max_results=PAGE_SIZE,
        )
        for _, scoped in instances.aggregated_list(request=request):
            for instance in scoped.instances:
                labels = instance.labels
                # Defense in depth: never trust the server-side filter alone.
                if labels.get(key) == value and POOL_TAG in labels:
                    yield instance

    def _to_cloud_instance(self, instance: Any, deleting: bool = False) -> CloudInstance:
        labels = dict(instance.labels)
        scheduling = instance.scheduling
        spot = str(scheduling.provisioning_model) == "SPOT" or bool(scheduling.preemptible)
        accelerators = list(instance.guest_accelerators)
        gpu_type = _short(accelerators[0].accelerator_type) if accelerators else None
        gpu_num = int(accelerators[0].accelerator_count) if accelerators else 0
        nics = list(instance.network_interfaces)
        private_ip = str(nics[0].network_i_p) if nics else ""
        return CloudInstance(
            cloud_id=instance.name,
            pool=labels[POOL_TAG],
            record_id=labels.get(RECORD_TAG),
            instance_type=gce_params.offering_name(
                _short(instance.machine_type), gpu_type, gpu_num
            ),
            location=_short(instance.zone),
            is_spot=spot,
            state=(
                CloudState.TERMINATING
                if deleting
                else GCE_STATES.get(str(instance.status), CloudState.PENDING)
            ),
            # The current run's start: a stopped VM started again bills from its last start.
            launched_at=_timestamp(
                str(instance.last_start_timestamp or instance.creation_timestamp),
                self._clock.now(),
            ),
            private_ip=private_ip or None,
        )


def _status(operation: Any) -> str:
    """An Operation's status by name (an enum on Operation, a string on Instance)."""
    status = operation.status
    return str(getattr(status, "name", status))


def _json(body: Mapping[str, Any]) -> str:
    import json

    return json.dumps(body)


__all__ = ["GCE_STATES", "GceProvider", "StartupScriptRenderer"]
