"""Ec2Provider: the CloudProvider port on Amazon EC2 (on-demand and spot via RunInstances).

Ownership is the first invariant: an instance or spot request is ours only when it carries
the pool's ``tag_key=tag_value`` pair *and* a pool tag. Every listing asks EC2 for our tag
(so nothing else is described into state) and re-checks the tags client-side (so
correctness never rests on a server-side filter: moto, for one, ignores some). Terminate and
cancel act only on ids such a listing has just confirmed, never on ids as given.

boto3/botocore are imported lazily: building a provider or importing this module costs
nothing until the first EC2 call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from corral.adapters.aws.ec2_errors import launch_error_from
from corral.adapters.aws.ec2_params import render_user_data, run_instances_params
from corral.adapters.aws.events import EC2_STATES
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

SPOT_STATES: Mapping[str, SpotRequestState] = {s.value: s for s in SpotRequestState}
# Instances that terminate() would still change (shutting-down ones are already going).
_TERMINABLE = ["pending", "running", "stopping", "stopped"]
_OURS_ANY = [*_TERMINABLE, "shutting-down", "terminated"]
_OPEN_SPOT = ["open", "active"]
# EC2 accepts up to 200 values per filter; TerminateInstances up to 1000 ids per call.
FILTER_CHUNK = 200
TERMINATE_BATCH = 1000
PAGE_SIZE = 1000


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _tags(resource: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in resource.get("Tags") or ()}


def _timestamp(value: Any, default: float) -> float:
    return value.timestamp() if isinstance(value, datetime) else default


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
    ) -> None:
        self._pools = cloud_pools(config, AwsProvider)
        # Where agents of pools without a master_url reach the control plane (the API).
        self._api_url = api_url
        # One listing per (region, tag pair) covers every pool sharing it.
        self._scopes = sorted({(p.region, p.tag_key, p.tag_value) for p in self._pools.values()})
        self._client = client
        self._clients: dict[str, Any] = {}
        self._clock: Clock = clock or SystemClock()
        self._user_data = user_data or self._default_user_data

    # ---- the port -------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> LaunchResult:
        from botocore.exceptions import (  # type: ignore[import-untyped]
            BotoCoreError,
            ClientError,
            ParamValidationError,
        )

        provider = self._pools.get(request.pool)
        if provider is None:
            raise LaunchError(
                LaunchErrorClass.INVALID_CONFIG, "UnknownPool", f"no AWS pool {request.pool!r}"
            )
        params = run_instances_params(provider, request, self._user_data(request))
        try:
            response = self._ec2(provider.region).run_instances(**params)
        except ClientError as error:
            raise launch_error_from(error) from error
        except ParamValidationError as error:
            raise LaunchError(
                LaunchErrorClass.INVALID_CONFIG, "ParamValidationError", str(error)
            ) from error
        except BotoCoreError as error:
            # A timeout or a dropped connection: the instance may exist. Retrying with the
            # same ClientToken returns it instead of launching a second one.
            raise LaunchError(LaunchErrorClass.UNKNOWN, type(error).__name__, str(error)) from error
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
        if not wanted:
            return frozenset()
        for region in sorted({r for r, _, _ in self._scopes}):
            terminable: set[str] = set()
            for _, key, value in (s for s in self._scopes if s[0] == region):
                for chunk in _chunks(wanted, FILTER_CHUNK):
                    described = self._describe_instances(region, key, value, chunk, _OURS_ANY)
                    for instance in described:
                        confirmed.add(instance["InstanceId"])
                        if instance["State"]["Name"] in _TERMINABLE:
                            terminable.add(instance["InstanceId"])
            # A terminable one that vanished between the describe and the call is gone too:
            # ours (described under our tag a moment ago) and confirmed either way.
            for batch in _chunks(sorted(terminable), TERMINATE_BATCH):
                self._call_skipping_gone(
                    region, "terminate_instances", "InstanceIds", batch, "InvalidInstanceID"
                )
        return frozenset(confirmed)

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
                self._call_skipping_gone(
                    region,
                    "cancel_spot_instance_requests",
                    "SpotInstanceRequestIds",
                    batch,
                    "InvalidSpotInstanceRequestID",
                )

    # ---- EC2 calls --------------------------------------------------------------------
    def _ec2(self, region: str) -> Any:
        if self._client is not None:
            return self._client
        if region not in self._clients:
            import boto3  # type: ignore[import-untyped]
            from botocore.config import Config  # type: ignore[import-untyped]

            # Standard retries re-send throttled calls with the same ClientToken: safe.
            config = Config(retries={"mode": "standard", "max_attempts": 5})
            self._clients[region] = boto3.client("ec2", region_name=region, config=config)
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

    def _call_skipping_gone(
        self, region: str, operation: str, param: str, ids: list[str], gone_prefix: str
    ) -> None:
        """Call ``operation`` on ``ids``; if one vanished since we described it (EC2 fails
        the whole call for one unknown id), go one by one and skip the vanished ones."""
        from botocore.exceptions import ClientError

        call = getattr(self._ec2(region), operation)
        try:
            call(**{param: ids})
            return
        except ClientError as error:
            if not str(error.response.get("Error", {}).get("Code", "")).startswith(gone_prefix):
                raise
        for one in ids:
            try:
                call(**{param: [one]})
            except ClientError as error:
                code = str(error.response.get("Error", {}).get("Code", ""))
                if not code.startswith(gone_prefix):
                    raise

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
        return render_user_data(self._pools[request.pool], request, self._api_url)


__all__ = ["EC2_STATES", "Ec2Provider", "UserDataRenderer"]
