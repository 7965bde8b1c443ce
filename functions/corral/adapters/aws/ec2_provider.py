"""Ec2Provider: the CloudProvider port on Amazon EC2 (on-demand and spot via RunInstances).

Ownership is the first invariant: an instance or spot request is ours only when it carries
the pool's ``tag_key=tag_value`` pair *and* a pool tag. Every listing asks EC2 for our tag
(so nothing else is described into state) and re-checks the tags client-side (so
correctness never rests on a server-side filter: moto, for one, ignores some). Terminate and
cancel act only on ids such a listing has just confirmed, never on ids as given; stop and
start also require the pool tag to name a pool of this deployment.

The warm pool: a stoppable spot instance comes from a *persistent* spot request (EC2 cannot
stop a one-time one). Terminating such an instance reopens its request and EC2 launches a
replacement, so ``terminate`` first cancels the request behind each spot instance it is
about to terminate (the id comes from the same describe).

A launch maps ``root_volume_size`` to the image's own root device, read with DescribeImages
once per (region, image) for the life of the provider (a warm Lambda container keeps it).

boto3/botocore are imported lazily: building a provider or importing this module costs
nothing until the first EC2 call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from corral.adapters.aws.ec2_errors import launch_error, launch_error_from
from corral.adapters.aws.ec2_images import RootDevices
from corral.adapters.aws.ec2_params import (
    check_user_data,
    render_user_data,
    run_instances_params,
)
from corral.adapters.aws.ec2_states import EC2_STATES
from corral.adapters.provider_pools import cloud_pools
from corral.domain.config.aws import AwsProvider
from corral.domain.config.cluster import ClusterConfig
from corral.domain.errors import LaunchError, LaunchErrorClass
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.ports.clock import Clock, SystemClock
from corral.ports.cloud import (
    CloudInstance,
    CloudState,
    LaunchRequest,
    LaunchResult,
    SpotRequest,
    SpotRequestState,
)

UserDataRenderer = Callable[[LaunchRequest], str]

SPOT_STATES: Mapping[str, SpotRequestState] = {
    **{s.value: s for s in SpotRequestState},
    # A persistent request whose instance we stopped (a warm instance): the instance still
    # exists. Never OPEN: cancelling a disabled request makes EC2 terminate its instance.
    "disabled": SpotRequestState.ACTIVE,
}
# Instances that terminate() would still change (shutting-down ones are already going).
_TERMINABLE = ["pending", "running", "stopping", "stopped"]
_OURS_ANY = [*_TERMINABLE, "shutting-down", "terminated"]
_OPEN_SPOT = ["open", "active"]
# stop(): what StopInstances is sent for, and what is already stopping or stopped.
_TO_STOP = ("pending", "running")
_STOPPED = ("stopping", "stopped")
# start(): what is confirmed as it is, and what can never be started again.
_UP = ("pending", "running")
_GONE = ("shutting-down", "terminated")
# Refusals that concern one instance of a stop batch (EC2 fails the whole call): it vanished,
# is pending and never ran, or is a one-time spot instance. That one is left unconfirmed.
_STOP_SKIPS = ("InvalidInstanceID", "IncorrectInstanceState", "UnsupportedOperation")
# EC2 accepts up to 200 values per filter; TerminateInstances up to 1000 ids per call.
FILTER_CHUNK = 200
TERMINATE_BATCH = 1000
STOP_BATCH = 1000
PAGE_SIZE = 1000


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _tags(resource: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in resource.get("Tags") or ()}


def _timestamp(value: Any, default: float) -> float:
    return value.timestamp() if isinstance(value, datetime) else default


def _state(instance: Mapping[str, Any]) -> str:
    return str((instance.get("State") or {}).get("Name", ""))


def _error_code(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


@contextmanager
def _launch_errors() -> Iterator[None]:
    """Any botocore failure of a launch or a start as a classified ``LaunchError``."""
    from botocore.exceptions import (  # type: ignore[import-untyped]
        BotoCoreError,
        ClientError,
        ParamValidationError,
    )

    try:
        yield
    except ClientError as error:
        raise launch_error_from(error) from error
    except ParamValidationError as error:
        raise launch_error("ParamValidationError", str(error)) from error
    except BotoCoreError as error:
        # A timeout or a dropped connection: the call may have happened. Retrying is safe:
        # RunInstances with the same ClientToken returns the instance it launched, and
        # start() finds a started instance pending or running and confirms it.
        raise LaunchError(LaunchErrorClass.UNKNOWN, type(error).__name__, str(error)) from error


class Ec2Provider:
    """Implements ``corral.ports.cloud.CloudProvider`` for the ``type: aws`` pools.

    ``client``: one EC2 client used for every region (tests, the local stack); by default a
    client per region is created on first use. ``user_data``: renders the bootstrap script
    of one launch; by default ``corral.bootstrap.render_bootstrap`` fed from the pool's block
    (see ``ec2_params.bootstrap_settings``).
    """

    def __init__(
        self,
        config: ClusterConfig | Mapping[str, AwsProvider],
        *,
        client: Any = None,
        clock: Clock | None = None,
        user_data: UserDataRenderer | None = None,
        api_url: str | None = None,
        agent_settings: Mapping[str, object] | None = None,
    ) -> None:
        self._pools = cloud_pools(config, AwsProvider)
        # Where agents of pools without a master_url reach the control plane (the API).
        self._api_url = api_url
        # The deployment's agent settings, for every launch's user data (a pool that names no
        # instance profile got the deployment's when its config was loaded:
        # domain/config/agent_identity.py).
        self._agent_settings = dict(agent_settings or {})
        # One listing per (region, tag pair) covers every pool sharing it.
        self._scopes = sorted({(p.region, p.tag_key, p.tag_value) for p in self._pools.values()})
        self._client = client
        self._clients: dict[str, Any] = {}
        self._clock: Clock = clock or SystemClock()
        self._user_data = user_data or self._default_user_data
        self._root_devices = RootDevices(self._ec2)

    # ---- the port -------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> LaunchResult:
        provider = self._pools.get(request.pool)
        if provider is None:
            raise LaunchError(
                LaunchErrorClass.INVALID_CONFIG, "UnknownPool", f"no AWS pool {request.pool!r}"
            )
        user_data = self._user_data(request)
        check_user_data(user_data)
        with _launch_errors():
            root_device = self._root_devices.of(provider.region, provider.image_id)
        params = run_instances_params(provider, request, user_data, root_device)
        with _launch_errors():
            response = self._ec2(provider.region).run_instances(**params)
        instance = response["Instances"][0]
        # The launch time on the control plane's clock: deadlines are computed on it.
        return LaunchResult(
            instance["InstanceId"], instance.get("SpotInstanceRequestId"), self._clock.now()
        )

    def list_owned(self) -> list[CloudInstance]:
        found: dict[str, CloudInstance] = {}
        states = list(EC2_STATES)
        for region, key, value in self._scopes:
            for instance in self._describe_instances(region, key, value, [], states):
                if instance["InstanceId"] not in found:
                    found[instance["InstanceId"]] = self._to_cloud_instance(instance)
        return list(found.values())

    def list_spot_requests(self) -> list[SpotRequest]:
        found: dict[str, SpotRequest] = {}
        for region, key, value in self._scopes:
            for request in self._describe_spot(region, key, value, []):
                if request["SpotInstanceRequestId"] not in found:
                    found[request["SpotInstanceRequestId"]] = self._to_spot_request(request)
        return list(found.values())

    def terminate(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        wanted = sorted(set(cloud_ids))
        confirmed: set[str] = set()
        for region in self._regions() if wanted else ():
            terminable: dict[str, str | None] = {}  # instance id -> its spot request id
            for instance in self._owned_among(region, wanted, _OURS_ANY):
                confirmed.add(instance["InstanceId"])
                if _state(instance) in _TERMINABLE:
                    terminable[instance["InstanceId"]] = instance.get("SpotInstanceRequestId")
            for batch in _chunks(sorted(terminable), TERMINATE_BATCH):
                self._cancel_requests_of(region, [terminable[i] for i in batch])
                # A terminable one that vanished between the describe and the call is gone
                # too: ours (described under our tag a moment ago), confirmed either way.
                self._call_skipping(
                    region, "terminate_instances", "InstanceIds", batch, ("InvalidInstanceID",)
                )
        return frozenset(confirmed)

    def stop(self, cloud_ids: Sequence[str]) -> frozenset[str]:
        wanted = sorted(set(cloud_ids))
        confirmed: set[str] = set()
        for region in self._regions() if wanted else ():
            to_stop: list[str] = []
            states = [*_TO_STOP, *_STOPPED]
            for instance in self._owned_among(region, wanted, states, known_pools=True):
                if _state(instance) in _STOPPED:
                    confirmed.add(instance["InstanceId"])  # a repeat: already on its way
                elif _state(instance) in _TO_STOP:
                    to_stop.append(instance["InstanceId"])
            for batch in _chunks(sorted(to_stop), STOP_BATCH):
                confirmed |= self._call_skipping(
                    region, "stop_instances", "InstanceIds", batch, _STOP_SKIPS
                )
        return frozenset(confirmed)

    def start(self, cloud_id: str, token: str) -> LaunchResult:
        # ``token`` is unused: StartInstances takes no idempotency token, and needs none (a
        # repeat finds the instance pending or running and confirms it).
        with _launch_errors():
            region, instance = self._owned_one(cloud_id)
            state = _state(instance)
            if state in _GONE:
                raise launch_error("InstanceTerminated", f"instance {cloud_id} is {state}")
            if state == "stopping":
                raise launch_error(
                    "IncorrectInstanceState", f"instance {cloud_id} is still stopping"
                )
            if state not in _UP:
                self._ec2(region).start_instances(InstanceIds=[cloud_id])
        # When billing started again, on the control plane's clock (deadlines are computed on
        # it). For one already up (a repeated start) that is a little late, never too early:
        # its registration deadline only moves later.
        return LaunchResult(cloud_id, instance.get("SpotInstanceRequestId"), self._clock.now())

    def cancel_spot_requests(self, request_ids: Sequence[str]) -> None:
        wanted = sorted(set(request_ids))
        if not wanted:
            return
        for region in sorted({r for r, _, _ in self._scopes}):
            confirmed: set[str] = set()
            for _, key, value in (s for s in self._scopes if s[0] == region):
                for chunk in _chunks(wanted, FILTER_CHUNK):
                    described = self._describe_spot(region, key, value, chunk, _OPEN_SPOT)
                    confirmed.update(r["SpotInstanceRequestId"] for r in described)
            for batch in _chunks(sorted(confirmed), FILTER_CHUNK):
                self._call_skipping(
                    region,
                    "cancel_spot_instance_requests",
                    "SpotInstanceRequestIds",
                    batch,
                    ("InvalidSpotInstanceRequestID",),
                )

    # ---- EC2 calls --------------------------------------------------------------------
    def _regions(self) -> list[str]:
        return sorted({r for r, _, _ in self._scopes})

    def _owned_among(
        self, region: str, ids: list[str], states: list[str], known_pools: bool = False
    ) -> Iterator[Mapping[str, Any]]:
        """Our instances in ``region`` among ``ids``, once each; with ``known_pools``, only
        those whose pool tag names a pool of this deployment under the same tag pair."""
        seen: set[str] = set()
        for _, key, value in (s for s in self._scopes if s[0] == region):
            for chunk in _chunks(ids, FILTER_CHUNK):
                for instance in self._describe_instances(region, key, value, chunk, states):
                    if instance["InstanceId"] in seen:
                        continue
                    if known_pools and not self._in_known_pool(instance, region, key, value):
                        continue
                    seen.add(instance["InstanceId"])
                    yield instance

    def _in_known_pool(
        self, instance: Mapping[str, Any], region: str, key: str, value: str
    ) -> bool:
        provider = self._pools.get(_tags(instance)[POOL_TAG])
        if provider is None:
            return False
        return (provider.region, provider.tag_key, provider.tag_value) == (region, key, value)

    def _owned_one(self, cloud_id: str) -> tuple[str, Mapping[str, Any]]:
        """The region and description of one instance of ours (any state), or a NotOurs
        refusal: unknown, another cluster's (never described: the filter asks for our tag)
        or of a pool this deployment does not know all look alike from here."""
        for region in self._regions():
            for instance in self._owned_among(region, [cloud_id], _OURS_ANY, known_pools=True):
                return region, instance
        raise launch_error("NotOurs", f"no instance {cloud_id} of ours in a known pool")

    def _cancel_requests_of(self, region: str, request_ids: Iterable[str | None]) -> None:
        """Cancel the spot requests behind instances about to be terminated, in one call.

        A persistent request (a warm pool's spot instance) would otherwise reopen and EC2
        would launch a replacement. Cancelling a one-time request whose instance is running
        changes nothing, so every spot instance's request goes: the describe cannot tell
        the two kinds apart. These requests are ours: each launched an instance a tagged
        describe has just confirmed, and our RunInstances tagged it at creation (IAM's
        ResourceTag condition holds it to that). Cancelling never ends the instance itself
        (except a stopped one, which terminate ends anyway).
        """
        wanted = sorted({r for r in request_ids if r})
        if wanted:
            self._call_skipping(
                region,
                "cancel_spot_instance_requests",
                "SpotInstanceRequestIds",
                wanted,
                ("InvalidSpotInstanceRequestID",),
            )

    def _ec2(self, region: str) -> Any:
        if self._client is not None:
            return self._client
        if region not in self._clients:
            from botocore.config import Config  # type: ignore[import-untyped]

            from corral.adapters.aws import clients

            # Standard retries re-send throttled calls with the same ClientToken: safe.
            config = Config(retries={"mode": "standard", "max_attempts": 5})
            self._clients[region] = clients.client("ec2", region_name=region, config=config)
        return self._clients[region]

    def _describe_instances(
        self, region: str, key: str, value: str, ids: list[str], states: list[str]
    ) -> Iterator[Mapping[str, Any]]:
        """Our instances (by tag, re-checked here), optionally only those with these ids.

        Ids go in a filter, not ``InstanceIds``: an unknown id is then simply not returned
        instead of failing the whole call with InvalidInstanceID.NotFound.
        """
        filters = [
            {"Name": f"tag:{key}", "Values": [value]},
            {"Name": "instance-state-name", "Values": states},
        ]
        if ids:
            filters.append({"Name": "instance-id", "Values": ids})
        paginator = self._ec2(region).get_paginator("describe_instances")
        pages = paginator.paginate(Filters=filters, PaginationConfig={"PageSize": PAGE_SIZE})
        for page in pages:
            for reservation in page.get("Reservations", ()):
                yield from self._ours(reservation.get("Instances", ()), key, value)

    def _describe_spot(
        self, region: str, key: str, value: str, ids: list[str], states: list[str] | None = None
    ) -> Iterator[Mapping[str, Any]]:
        filters = [{"Name": f"tag:{key}", "Values": [value]}]
        if ids:
            filters.append({"Name": "spot-instance-request-id", "Values": ids})
        if states:
            filters.append({"Name": "state", "Values": states})
        paginator = self._ec2(region).get_paginator("describe_spot_instance_requests")
        pages = paginator.paginate(Filters=filters, PaginationConfig={"PageSize": PAGE_SIZE})
        for page in pages:
            found = self._ours(page.get("SpotInstanceRequests", ()), key, value)
            # Re-check the state too: never cancel what the server filter let through.
            yield from (r for r in found if not states or r.get("State") in states)

    @staticmethod
    def _ours(
        resources: Iterable[Mapping[str, Any]], key: str, value: str
    ) -> Iterator[Mapping[str, Any]]:
        """Defense in depth: only resources that really carry the pair and a pool tag."""
        for resource in resources:
            tags = _tags(resource)
            if tags.get(key) == value and POOL_TAG in tags:
                yield resource

    def _call_skipping(
        self, region: str, operation: str, param: str, ids: list[str], skips: tuple[str, ...]
    ) -> set[str]:
        """Call ``operation`` on ``ids``; returns the ids it accepted. EC2 fails the whole
        call for one id it refuses (one vanished since we described it, one in a state the
        operation does not take): on such a code (a prefix in ``skips``) go one by one and
        leave the refused ones out. Any other error is raised."""
        from botocore.exceptions import ClientError

        call = getattr(self._ec2(region), operation)
        try:
            call(**{param: ids})
            return set(ids)
        except ClientError as error:
            if not _error_code(error).startswith(skips):
                raise
        accepted: set[str] = set()
        for one in ids:
            try:
                call(**{param: [one]})
                accepted.add(one)
            except ClientError as error:
                if not _error_code(error).startswith(skips):
                    raise
        return accepted

    # ---- mapping ----------------------------------------------------------------------
    def _to_cloud_instance(self, instance: Mapping[str, Any]) -> CloudInstance:
        tags = _tags(instance)
        pool = tags[POOL_TAG]
        subnet = instance.get("SubnetId") or ""
        provider = self._pools.get(pool)
        # Same convention as Offering.location: the region for a pool without subnets.
        location = (
            provider.region
            if provider is not None and not provider.network_interface.subnet_id
            else subnet
        )
        private_ip = instance.get("PrivateIpAddress")
        return CloudInstance(
            cloud_id=instance["InstanceId"],
            pool=pool,
            record_id=tags.get(RECORD_TAG),
            instance_type=instance.get("InstanceType", ""),
            location=location,
            is_spot=instance.get("InstanceLifecycle") == "spot",
            state=EC2_STATES.get(instance.get("State", {}).get("Name", ""), CloudState.PENDING),
            launched_at=_timestamp(instance.get("LaunchTime"), self._clock.now()),
            spot_request_id=instance.get("SpotInstanceRequestId"),
            private_ip=private_ip if isinstance(private_ip, str) and private_ip else None,
        )

    def _to_spot_request(self, request: Mapping[str, Any]) -> SpotRequest:
        tags = _tags(request)
        return SpotRequest(
            request_id=request["SpotInstanceRequestId"],
            pool=tags[POOL_TAG],
            record_id=tags.get(RECORD_TAG),
            state=SPOT_STATES.get(request.get("State", ""), SpotRequestState.OPEN),
            status_code=str((request.get("Status") or {}).get("Code", "")),
            created_at=_timestamp(request.get("CreateTime"), self._clock.now()),
            instance_id=request.get("InstanceId"),
        )

    def _default_user_data(self, request: LaunchRequest) -> str:
        return render_user_data(
            self._pools[request.pool], request, self._api_url, self._agent_settings
        )


__all__ = ["EC2_STATES", "Ec2Provider", "UserDataRenderer"]
