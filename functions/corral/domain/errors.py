"""Launch error classes: what went wrong at the cloud, and so what the control plane does.

Providers map every cloud error code to one class in one table (see the adapters); the
services act on the class only, so EC2 and Compute Engine behave alike.
"""

from __future__ import annotations

from enum import StrEnum


class LaunchErrorClass(StrEnum):
    # The offering has no capacity right now: remember it as unavailable, try the next one.
    CAPACITY = "capacity"
    # Spot price above spot_max_price: like capacity, but for spot offerings only.
    PRICE = "price"
    # Account limits (vCPU, spot instance count): back the whole pool off, show on trials.
    QUOTA = "quota"
    # The caller may not do this (IAM, PassRole, org policy): back the pool off, loudly.
    PERMISSION = "permission"
    # The launch config itself is wrong (bad AMI, subnet, key): fail the record, say why.
    INVALID_CONFIG = "invalid_config"
    # API rate limits: retry the same attempt soon, same token.
    THROTTLED = "throttled"
    # Anything else: retry a bounded number of times, then fail the record.
    UNKNOWN = "unknown"

    @property
    def marks_offering_unavailable(self) -> bool:
        return self in (LaunchErrorClass.CAPACITY, LaunchErrorClass.PRICE)

    @property
    def backs_off_pool(self) -> bool:
        return self in (LaunchErrorClass.QUOTA, LaunchErrorClass.PERMISSION)

    @property
    def fails_record(self) -> bool:
        return self is LaunchErrorClass.INVALID_CONFIG

    @property
    def retries_same_attempt(self) -> bool:
        return self is LaunchErrorClass.THROTTLED


class LaunchError(Exception):
    """A launch the cloud refused, with the provider's own code kept for the event log."""

    def __init__(self, error_class: LaunchErrorClass, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.error_class = error_class
        self.code = code
        self.message = message


class ConflictError(Exception):
    """A conditional write lost: someone else changed the record first. Re-read and retry."""


class NotFoundError(Exception):
    """A record the caller named does not exist."""
