"""The EC2 error table: every code the control plane can meet maps to the class it acts on."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from corral.adapters.aws.ec2_errors import (
    EC2_ERRORS,
    SPOT_STATUS_ERRORS,
    SPOT_STATUS_OK,
    classify,
    launch_error_from,
    spot_status_error,
)
from corral.domain.errors import LaunchErrorClass

C = LaunchErrorClass

# Pinned on purpose: changing how one of these codes is handled must change this test too.
REQUIRED = {
    "InsufficientInstanceCapacity": C.CAPACITY,
    "InsufficientCapacity": C.CAPACITY,
    "InsufficientHostCapacity": C.CAPACITY,
    "InsufficientReservedInstanceCapacity": C.CAPACITY,
    "Unsupported": C.CAPACITY,
    "InsufficientFreeAddressesInSubnet": C.CAPACITY,
    "SpotMaxPriceTooLow": C.PRICE,
    "MaxSpotInstanceCountExceeded": C.QUOTA,
    "VcpuLimitExceeded": C.QUOTA,
    "InstanceLimitExceeded": C.QUOTA,
    "RequestLimitExceeded": C.THROTTLED,
    "Throttling": C.THROTTLED,
    "ThrottlingException": C.THROTTLED,
    "InvalidParameterValue": C.INVALID_CONFIG,
    "InvalidParameterCombination": C.INVALID_CONFIG,
    "InvalidAMIID.NotFound": C.INVALID_CONFIG,
    "InvalidAMIID.Malformed": C.INVALID_CONFIG,
    "InvalidSubnetID.NotFound": C.INVALID_CONFIG,
    "InvalidGroup.NotFound": C.INVALID_CONFIG,
    "InvalidKeyPair.NotFound": C.INVALID_CONFIG,
    "InvalidBlockDeviceMapping": C.INVALID_CONFIG,
    "IdempotentParameterMismatch": C.INVALID_CONFIG,
    "UnauthorizedOperation": C.PERMISSION,
    "AuthFailure": C.PERMISSION,
    "OptInRequired": C.PERMISSION,
    "PendingVerification": C.PERMISSION,
    "InternalError": C.UNKNOWN,
    "ServiceUnavailable": C.UNKNOWN,
    # spot request status codes
    "capacity-not-available": C.CAPACITY,
    "capacity-oversubscribed": C.CAPACITY,
    "price-too-low": C.PRICE,
    "not-scheduled-yet": C.UNKNOWN,
    "launch-group-constraint": C.CAPACITY,
    "az-group-constraint": C.CAPACITY,
    "placement-group-constraint": C.CAPACITY,
    "constraint-not-fulfillable": C.INVALID_CONFIG,
    "bad-parameters": C.INVALID_CONFIG,
    "system-error": C.UNKNOWN,
    "instance-terminated-by-price": C.PRICE,
    "instance-terminated-no-capacity": C.CAPACITY,
    "instance-terminated-capacity-oversubscribed": C.CAPACITY,
}


@pytest.mark.parametrize(("code", "expected"), sorted(REQUIRED.items()))
def test_required_codes_are_in_the_table_with_their_class(
    code: str, expected: LaunchErrorClass
) -> None:
    assert code in EC2_ERRORS or code in SPOT_STATUS_ERRORS
    assert classify(code) is expected


@pytest.mark.parametrize(("code", "expected"), sorted({**EC2_ERRORS, **SPOT_STATUS_ERRORS}.items()))
def test_every_code_in_the_table_classifies_and_becomes_a_launch_error(
    code: str, expected: LaunchErrorClass
) -> None:
    assert classify(code) is expected
    error = ClientError({"Error": {"Code": code, "Message": "why"}}, "RunInstances")
    launch_error = launch_error_from(error)
    assert (launch_error.error_class, launch_error.code, launch_error.message) == (
        expected,
        code,
        "why",
    )


def test_the_two_tables_do_not_overlap() -> None:
    assert not set(EC2_ERRORS) & set(SPOT_STATUS_ERRORS)
    assert not set(SPOT_STATUS_ERRORS) & SPOT_STATUS_OK


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("Server.InsufficientInstanceCapacity", C.CAPACITY),  # instance StateReason codes
        ("Client.VcpuLimitExceeded", C.QUOTA),
        ("InsufficientSomethingNew", C.CAPACITY),  # naming rules for codes not in the table
        ("DedicatedHostLimitExceeded", C.QUOTA),
        ("InvalidLaunchTemplateId.NotFound", C.INVALID_CONFIG),
        ("InvalidFoo", C.INVALID_CONFIG),
        ("SomethingBrandNew", C.UNKNOWN),
        ("", C.UNKNOWN),
    ],
)
def test_codes_outside_the_table_follow_ec2_naming(code: str, expected: LaunchErrorClass) -> None:
    assert classify(code) is expected


def test_spot_statuses_that_are_progress_are_not_errors() -> None:
    for code in SPOT_STATUS_OK:
        assert spot_status_error(code) is None
    assert spot_status_error("capacity-not-available") is C.CAPACITY
    assert spot_status_error("some-new-status") is C.UNKNOWN


def test_a_client_error_without_details_is_unknown() -> None:
    error = launch_error_from(ClientError({}, "RunInstances"))
    assert (error.error_class, error.code) == (C.UNKNOWN, "Unknown")
