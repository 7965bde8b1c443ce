"""The one table from EC2 error codes (and spot request status codes) to launch error classes.

The services act on :class:`LaunchErrorClass` only, never on a provider's code, so this
table decides what the control plane does about each refusal: try another offering
(CAPACITY, PRICE), back the pool off (QUOTA, PERMISSION), fail the record (INVALID_CONFIG),
retry the same attempt with the same token (THROTTLED), or retry a bounded number of times
(UNKNOWN). A code missing from the table falls back to a few naming rules EC2 follows
consistently (``*.NotFound``, ``Insufficient*``, ``*LimitExceeded``), then to UNKNOWN:
an unknown code is retried a bounded number of times, never looped on forever.

This module imports no boto3: ``launch_error_from`` only reads ``ClientError.response``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from corral.domain.errors import LaunchError, LaunchErrorClass

_C = LaunchErrorClass

# --- API error codes (RunInstances, StartInstances, and what any EC2 call can answer) -----
EC2_ERRORS: Mapping[str, LaunchErrorClass] = MappingProxyType(
    {
        # No capacity for this offering right now: the planner tries the next one.
        "InsufficientInstanceCapacity": _C.CAPACITY,
        "InsufficientCapacity": _C.CAPACITY,
        "InsufficientHostCapacity": _C.CAPACITY,
        "InsufficientReservedInstanceCapacity": _C.CAPACITY,
        "InsufficientCapacityOnHost": _C.CAPACITY,
        # The type is not offered in this subnet's zone: another zone may have it.
        "Unsupported": _C.CAPACITY,
        # The subnet ran out of IP addresses: like capacity, for that subnet (offering).
        "InsufficientFreeAddressesInSubnet": _C.CAPACITY,
        "SpotMaxPriceTooLow": _C.PRICE,
        # Account limits: back the whole pool off.
        "MaxSpotInstanceCountExceeded": _C.QUOTA,
        "VcpuLimitExceeded": _C.QUOTA,
        "InstanceLimitExceeded": _C.QUOTA,
        "VolumeLimitExceeded": _C.QUOTA,
        "NetworkInterfaceLimitExceeded": _C.QUOTA,
        "AddressLimitExceeded": _C.QUOTA,
        "ResourceLimitExceeded": _C.QUOTA,
        # Not allowed: IAM, iam:PassRole, SCPs, account state.
        "UnauthorizedOperation": _C.PERMISSION,
        "AuthFailure": _C.PERMISSION,
        "OptInRequired": _C.PERMISSION,
        "PendingVerification": _C.PERMISSION,
        "Blocked": _C.PERMISSION,
        "AccessDenied": _C.PERMISSION,
        "AccessDeniedException": _C.PERMISSION,
        "InvalidClientTokenId": _C.PERMISSION,
        "UnrecognizedClientException": _C.PERMISSION,
        "SignatureDoesNotMatch": _C.PERMISSION,
        "ExpiredToken": _C.PERMISSION,
        "RequestExpired": _C.PERMISSION,
        # The launch config is wrong: retrying cannot help, fail the record and say why.
        "InvalidParameterValue": _C.INVALID_CONFIG,
        "InvalidParameterCombination": _C.INVALID_CONFIG,
        "InvalidParameter": _C.INVALID_CONFIG,
        "MissingParameter": _C.INVALID_CONFIG,
        "UnknownParameter": _C.INVALID_CONFIG,
        "InvalidAMIID.NotFound": _C.INVALID_CONFIG,
        "InvalidAMIID.Malformed": _C.INVALID_CONFIG,
        "InvalidAMIID.Unavailable": _C.INVALID_CONFIG,
        "InvalidSubnetID.NotFound": _C.INVALID_CONFIG,
        "InvalidSubnetID.Malformed": _C.INVALID_CONFIG,
        "InvalidGroup.NotFound": _C.INVALID_CONFIG,
        "InvalidGroupId.Malformed": _C.INVALID_CONFIG,
        "InvalidSecurityGroupID.NotFound": _C.INVALID_CONFIG,
        "InvalidKeyPair.NotFound": _C.INVALID_CONFIG,
        "InvalidBlockDeviceMapping": _C.INVALID_CONFIG,
        "InvalidInstanceType": _C.INVALID_CONFIG,
        "InvalidUserData.Malformed": _C.INVALID_CONFIG,
        "InvalidTagKey.Malformed": _C.INVALID_CONFIG,
        "InvalidVpcID.NotFound": _C.INVALID_CONFIG,
        "InvalidPlacementGroup.Unknown": _C.INVALID_CONFIG,
        # IAM's code for a missing instance profile (moto; EC2 says InvalidParameterValue).
        "NoSuchEntity": _C.INVALID_CONFIG,
        "UserDataTooLarge": _C.INVALID_CONFIG,  # ours: raised before calling EC2
        # Same token, other parameters: a bug or a changed config; never launch twice.
        "IdempotentParameterMismatch": _C.INVALID_CONFIG,
        # API rate limits: retry the same attempt soon (same ClientToken, so no duplicate).
        "RequestLimitExceeded": _C.THROTTLED,
        "Throttling": _C.THROTTLED,
        "ThrottlingException": _C.THROTTLED,
        "RequestThrottled": _C.THROTTLED,
        "RequestThrottledException": _C.THROTTLED,
        "TooManyRequestsException": _C.THROTTLED,
        # --- StartInstances (a warm pool's stopped instance) ---
        # The instance (or its persistent spot request, marked-for-stop until it turns
        # disabled) is still on its way to stopped: start it again soon.
        "IncorrectInstanceState": _C.THROTTLED,
        "IncorrectSpotRequestState": _C.THROTTLED,
        # E.g. a one-time spot instance: it can never be stopped nor started.
        "UnsupportedOperation": _C.INVALID_CONFIG,
        # Ours, raised before calling EC2: no instance of ours has that id (unknown, another
        # cluster's, or of a pool this deployment does not know) / it is terminated.
        "NotOurs": _C.INVALID_CONFIG,
        "InstanceTerminated": _C.INVALID_CONFIG,
        # EC2's own trouble: retried a bounded number of times.
        "InternalError": _C.UNKNOWN,
        "InternalFailure": _C.UNKNOWN,
        "ServiceUnavailable": _C.UNKNOWN,
        "Unavailable": _C.UNKNOWN,
    }
)

# --- spot request status codes (DescribeSpotInstanceRequests Status.Code) -----------------
SPOT_STATUS_ERRORS: Mapping[str, LaunchErrorClass] = MappingProxyType(
    {
        "capacity-not-available": _C.CAPACITY,
        "capacity-oversubscribed": _C.CAPACITY,
        "price-too-low": _C.PRICE,
        # We never set ValidFrom, so a request waiting for its start date is unexpected.
        "not-scheduled-yet": _C.UNKNOWN,
        # Group constraints that cannot be met now: capacity for that offering.
        "launch-group-constraint": _C.CAPACITY,
        "az-group-constraint": _C.CAPACITY,
        "placement-group-constraint": _C.CAPACITY,
        # A constraint that is not valid (e.g. a zone that does not exist): the config.
        "constraint-not-fulfillable": _C.INVALID_CONFIG,
        "bad-parameters": _C.INVALID_CONFIG,
        "system-error": _C.UNKNOWN,
        # An instance ended by EC2: why tells the planner what to avoid next.
        "instance-terminated-by-price": _C.PRICE,
        "instance-terminated-no-capacity": _C.CAPACITY,
        "instance-terminated-capacity-oversubscribed": _C.CAPACITY,
        "instance-terminated-launch-group-constraint": _C.CAPACITY,
        "instance-stopped-by-price": _C.PRICE,
        "instance-stopped-no-capacity": _C.CAPACITY,
        "instance-stopped-capacity-oversubscribed": _C.CAPACITY,
    }
)

# Spot statuses that are not errors: the request is progressing, or we (a user) ended it.
SPOT_STATUS_OK: frozenset[str] = frozenset(
    {
        "pending-evaluation",
        "pending-fulfillment",
        "fulfilled",
        "request-canceled-and-instance-running",
        "marked-for-stop",
        "marked-for-termination",
        "marked-for-stop-by-experiment",
        "canceled-before-fulfillment",
        "schedule-expired",
        "instance-terminated-by-user",
        "instance-stopped-by-user",
        "instance-terminated-by-service",
        "spot-instance-terminated-by-user",
        "instance-terminated-by-experiment",
        "instance-stopped-by-experiment",
    }
)

# Instance StateReason codes carry a "Server." / "Client." prefix
# (e.g. Server.InsufficientInstanceCapacity); the rest is an API code.
_REASON_PREFIXES = ("Server.", "Client.")


def classify(code: str) -> LaunchErrorClass:
    """The class of an EC2 error code, spot status code or state reason code."""
    for prefix in _REASON_PREFIXES:
        if code.startswith(prefix):
            code = code[len(prefix) :]
    found = EC2_ERRORS.get(code) or SPOT_STATUS_ERRORS.get(code)
    if found is not None:
        return found
    # EC2's naming is regular; these rules classify codes added after this table was written.
    if code.startswith("Insufficient"):
        return _C.CAPACITY
    if code.endswith("LimitExceeded"):
        return _C.QUOTA
    if code.startswith("Invalid") or code.endswith((".NotFound", ".Malformed")):
        return _C.INVALID_CONFIG
    return _C.UNKNOWN


def spot_status_error(code: str) -> LaunchErrorClass | None:
    """The error a spot request's status code means, or None when it is not an error."""
    if code in SPOT_STATUS_OK:
        return None
    return classify(code)


def launch_error(code: str, message: str) -> LaunchError:
    """A refusal of our own (no EC2 call made), classified by the same table."""
    return LaunchError(classify(code), code, message)


def launch_error_from(error: Any) -> LaunchError:
    """A ``botocore.exceptions.ClientError`` as a classified :class:`LaunchError`.

    Typed ``Any`` so this module never imports botocore; it reads ``error.response`` only.
    """
    response: Mapping[str, Any] = getattr(error, "response", None) or {}
    details: Mapping[str, Any] = response.get("Error") or {}
    code = str(details.get("Code") or "Unknown")
    message = str(details.get("Message") or "")
    return LaunchError(classify(code), code, message)


__all__ = [
    "EC2_ERRORS",
    "SPOT_STATUS_ERRORS",
    "SPOT_STATUS_OK",
    "classify",
    "launch_error",
    "launch_error_from",
    "spot_status_error",
]
