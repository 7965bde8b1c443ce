"""Pure functions that turn a launch request and a pool's AWS block into RunInstances input.

Kept apart from the boto3 calls so the exact request is easy to read and to test, and so
importing it costs nothing (no boto3).

Why RunInstances with ``InstanceMarketOptions`` for spot, not RequestSpotInstances:
- tags at creation: ``TagSpecifications`` put the ownership pair on the instance, its
  volumes and the spot request in the same call, so no untagged instance ever exists (a
  RequestSpotInstances instance is untagged until someone tags it after fulfilment, and a
  crash in between leaks it);
- the same ``ClientToken`` semantics as on-demand launches (one token, one instance);
- no separate open phase: a one-time request either fills at once or the call fails with a
  capacity or price error the planner acts on right away, instead of a request sitting open.
EC2 still creates a (one-time) spot request behind the instance, which is why
``list_spot_requests`` / ``cancel_spot_requests`` are still supported. A stoppable launch
(the pool keeps a warm pool) makes that request persistent instead: see ``spot_options``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from corral.bootstrap.render import (
    BootstrapSettings,
    check_script_size,
    launch_script,
    settings_for,
)
from corral.domain.config.aws import AwsProvider
from corral.domain.errors import LaunchError
from corral.domain.ownership import POOL_TAG, RECORD_TAG
from corral.ports.cloud import LaunchRequest

# EC2 limits user data to 16 KB before base64 (RunInstances refuses more).
USER_DATA_LIMIT = 16 * 1024
# EC2 ClientToken: at most 64 ASCII characters.
CLIENT_TOKEN_LIMIT = 64
# IMDSv2 only (no token-less metadata reads), and instance tags readable from IMDS so the
# agent learns its pool and record without ec2:DescribeTags. Hop limit 1, stated rather than
# left to the image (some AMIs default to 2): the IMDSv2 token's reply dies at the first
# router, so a trial container on a Docker bridge (one hop more) cannot get a token, hence
# not the instance role's credentials. Trials get credentials of their own from the agent
# (agent_runtime/trial_credentials.py); host-network trials are kept from the metadata
# service by the agent's firewall rule (agent_runtime/metadata_guard.py). docs/security.md.
METADATA_OPTIONS: dict[str, str | int] = {
    "HttpTokens": "required",
    "HttpPutResponseHopLimit": 1,
    "HttpEndpoint": "enabled",
    "InstanceMetadataTags": "enabled",
}


def client_token(token: str) -> str:
    """The request's token, shortened deterministically when EC2 would refuse its length."""
    if len(token) <= CLIENT_TOKEN_LIMIT and token.isascii():
        return token
    return hashlib.sha256(token.encode()).hexdigest()  # 64 hex characters


def resource_tags(provider: AwsProvider, request: LaunchRequest) -> list[dict[str, str]]:
    """Custom tags first, then ours, so a custom tag can never override an ownership tag."""
    tags: dict[str, str] = {t.key: t.value for t in provider.custom_tags}
    tags.update(
        {
            provider.tag_key: provider.tag_value,
            POOL_TAG: request.pool,
            RECORD_TAG: request.record_id,
            "Name": provider.instance_name,
        }
    )
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def subnet_for(provider: AwsProvider, location: str) -> str | None:
    """The subnet of an offering location; None means the region's default subnets."""
    if location in provider.network_interface.subnet_id:
        return location
    if location == provider.region and not provider.network_interface.subnet_id:
        return None
    raise LaunchError.invalid_config(
        "LocationNotInPool",
        f"location {location!r} is not a subnet of this pool "
        f"(pool locations: {', '.join(provider.locations)})",
    )


def check_user_data(user_data: str) -> None:
    """Refuse user data EC2 would refuse (an invalid config), before any EC2 call."""
    check_script_size(
        user_data,
        USER_DATA_LIMIT,
        "UserDataTooLarge",
        f"user data is {{size}} bytes, EC2 allows {USER_DATA_LIMIT}",
    )


def run_instances_params(
    provider: AwsProvider, request: LaunchRequest, user_data: str, root_device: str
) -> dict[str, Any]:
    """The complete RunInstances input for one launch attempt.

    ``root_device``: the image's ``RootDeviceName`` (``/dev/xvda`` on Amazon Linux,
    ``/dev/sda1`` on Ubuntu and the Deep Learning AMIs). ``root_volume_size`` applies to the
    mapping of that device; a mapping of any other name adds a second, unused volume and
    leaves the root at the image's size.
    """
    check_user_data(user_data)
    offering = request.offering
    tags = resource_tags(provider, request)
    resource_types = ["instance", "volume", "network-interface"]
    if offering.is_spot:
        resource_types.append("spot-instances-request")
    nic: dict[str, Any] = {
        "DeviceIndex": 0,
        "AssociatePublicIpAddress": provider.network_interface.public_ip,
        "DeleteOnTermination": True,
    }
    subnet = subnet_for(provider, offering.location)
    if subnet is not None:
        nic["SubnetId"] = subnet
    if provider.network_interface.security_group_id is not None:
        nic["Groups"] = [provider.network_interface.security_group_id]
    params: dict[str, Any] = {
        "ImageId": provider.image_id,
        "InstanceType": offering.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": client_token(request.token),
        "NetworkInterfaces": [nic],
        "BlockDeviceMappings": [
            {
                "DeviceName": root_device,
                "Ebs": {
                    "VolumeSize": provider.root_volume_size,
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                },
            }
        ],
        "MetadataOptions": dict(METADATA_OPTIONS),
        # The agent's dead man's switch runs `shutdown -h`: that must end the bill. Terminate,
        # except for an instance of a persistent spot request (a warm pool): terminated from
        # inside, its request would reopen and EC2 would launch another. Stopped, it costs
        # nothing more, and reconcile terminates it (cancelling the request first), as any
        # stopped instance that is not in the warm pool.
        "InstanceInitiatedShutdownBehavior": (
            "stop" if offering.is_spot and request.stoppable else "terminate"
        ),
        # boto3 base64-encodes UserData for RunInstances itself.
        "UserData": user_data,
        "TagSpecifications": [{"ResourceType": t, "Tags": tags} for t in resource_types],
    }
    if provider.ssh_key_name:
        params["KeyName"] = provider.ssh_key_name
    if provider.iam_instance_profile_arn:
        params["IamInstanceProfile"] = {"Arn": provider.iam_instance_profile_arn}
    if offering.is_spot:
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": spot_options(provider, request.stoppable),
        }
    return params


def spot_options(provider: AwsProvider, stoppable: bool) -> dict[str, Any]:
    """One-time and terminate on interruption, unless the pool keeps a warm pool: EC2 refuses
    to stop an instance of a one-time request (UnsupportedOperation), and RunInstances takes
    a persistent request only with the stop (or hibernate) interruption behaviour. The
    provider cancels that request before terminating the instance (else EC2 relaunches)."""
    spot: dict[str, Any] = (
        {"SpotInstanceType": "persistent", "InstanceInterruptionBehavior": "stop"}
        if stoppable
        else {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
    )
    if provider.spot_max_price is not None:
        spot["MaxPrice"] = str(provider.spot_max_price)
    return spot


def bootstrap_settings(
    provider: AwsProvider,
    request: LaunchRequest,
    default_api_url: str | None = None,
    deployment_settings: Mapping[str, object] | None = None,
) -> BootstrapSettings:
    """What the agent on this instance needs, from the pool's block and the launch, with the
    deployment's agent settings (``CORRAL_AGENT_SETTINGS``) over them."""
    return settings_for(
        provider,
        pool=request.pool,
        record_id=request.record_id,
        expected_gpus=request.offering.slots,
        auth="aws",
        default_api_url=default_api_url,
        aws_region=provider.region,
        cloudwatch_log_group=provider.log_group,
        agent_settings={
            **(deployment_settings or {}),
            **({"cloudwatch_log_stream": provider.log_stream} if provider.log_stream else {}),
        },
    )


def render_user_data(
    provider: AwsProvider,
    request: LaunchRequest,
    default_api_url: str | None = None,
    deployment_settings: Mapping[str, object] | None = None,
) -> str:
    """The bootstrap script of one launch; a script that cannot be made fails the record."""
    return launch_script(
        lambda: bootstrap_settings(provider, request, default_api_url, deployment_settings),
        USER_DATA_LIMIT,
        "UserDataTooLarge",
    )
