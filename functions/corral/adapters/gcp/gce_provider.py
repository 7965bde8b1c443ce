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

GCE has no spot requests: Spot VMs are instances. ``list_spot_requests`` is empty and
``cancel_spot_requests`` does nothing.

``google-cloud-compute`` (~1.3 s to import) is imported on the first call.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from corral.adapters.gcp import gce_params
from corral.adapters.gcp.gce_errors import launch_error_from_api, launch_error_from_operation
from corral.adapters.provider_pools import cloud_pools
from corral.domain.config.cluster import ClusterConfig
from corral.domain.config.gcp import GcpProvider
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.ports.clock import Clock, SystemClock
from corral.ports.cloud import CloudInstance, CloudState, LaunchRequest, LaunchResult, SpotRequest

StartupScriptRenderer = Callable[[GcpProvider, LaunchRequest], str]

# GCE's TERMINATED means stopped (the disk and the resource remain); deleted instances
# simply vanish from listings. The reconciler deletes STOPPED/STOPPING instances.
GCE_STATES: Mapping[str, CloudState] = {
    "PROVISIONING": CloudState.PENDING,
    "STAGING": CloudState.PENDING,
    "RUNNING": CloudState.RUNNING,
    "REPAIRING": CloudState.PENDING,
    "STOPPING": CloudState.STOPPING,
    "SUSPENDING": CloudState.STOPPING,
    "SUSPENDED": CloudState.STOPPED,
    "TERMINATED": CloudState.STOPPED,
}
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
        for project, key, value in self._scopes:
            for instance in self._aggregated(project, key, value):
                found.setdefault(instance.name, self._to_cloud_instance(instance))
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

    # ---- listing ----------------------------------------------------------------------
    def _aggregated(self, project: str, key: str, value: str) -> Iterator[Any]:
        """Our instances in every zone of ``project`` (by label, re-checked here)."""
        from google.cloud import compute_v1

        instances, _ = self._clients()
        request = compute_v1.AggregatedListInstancesRequest(
            project=project,
            filter=f'labels.{key} = "{value}"',
            max_results=PAGE_SIZE,
        )
        for _, scoped in instances.aggregated_list(request=request):
            for instance in scoped.instances:
                labels = instance.labels
                # Defense in depth: never trust the server-side filter alone.
                if labels.get(key) == value and POOL_TAG in labels:
                    yield instance

    def _to_cloud_instance(self, instance: Any) -> CloudInstance:
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
            state=GCE_STATES.get(str(instance.status), CloudState.PENDING),
            launched_at=_timestamp(str(instance.creation_timestamp), self._clock.now()),
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
