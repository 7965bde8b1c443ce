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

    @classmethod
    def invalid_config(cls, code: str, message: str) -> LaunchError:
        """A launch that cannot succeed as the pool is configured (it fails the record)."""
        return cls(LaunchErrorClass.INVALID_CONFIG, code, message)


class ConflictError(Exception):
    """A conditional write lost: someone else changed the record first. Re-read and retry."""


# ---- refusals -------------------------------------------------------------------------------
# What a service answers a caller it will not serve. Each class has one meaning; the API maps
# each to one HTTP status in one table (``corral.api.errors``), and the agent runtime acts on
# those statuses (a refused heartbeat stops the agent, 5xx is retried).
class Refused(Exception):
    """A request a service will not carry out; the message says why."""


class NotFoundError(Refused):
    """A record the caller named does not exist."""


class Forbidden(Refused):
    """The caller may not act on this record: an agent naming another instance's record, or
    a trial never placed on it."""


class ShutDown(Refused):
    """The caller's instance is being shut down (or is gone, or was declared lost): it must
    stop, not retry. Every agent write from such an instance is refused with it
    (``corral.domain.agent_fence``)."""


class Ended(Refused):
    """The trial the caller writes about has ended (COMPLETED, FAILED, CANCELLED): nothing
    more is recorded for it. The agent forgets the trial and does not send the write again."""


class Unhealthy(Refused):
    """The caller cannot do the work it offers (an agent short of GPUs, or that says it is
    unhealthy); its instance is terminated."""


class RetryLater(Refused):
    """Nothing was applied because the records kept changing; the same request later will be."""
