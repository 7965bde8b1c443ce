"""The one table from Compute Engine errors to launch error classes.

GCE reports a refused launch in two places, and both are classified here:

- the HTTP call fails at once (``google.api_core.exceptions.GoogleAPICallError``): an HTTP
  status and, in Google's error envelope, ``errors[].reason`` in camelCase
  (``quotaExceeded``, ``rateLimitExceeded``, ``forbidden``, ``invalid``...);
- the call succeeds but the *operation* ends in error: ``operation.error.errors[].code``
  in UPPER_SNAKE (``ZONE_RESOURCE_POOL_EXHAUSTED``, ``QUOTA_EXCEEDED``...), which is how
  stockouts arrive, often seconds after the insert returned.

A reason or code in the table wins; otherwise the HTTP status decides (400 invalid config,
401/403 permission, 404 a named resource is missing, 429 throttled, 5xx unknown). The
services act on the class only: CAPACITY tries the next offering, QUOTA / PERMISSION back
the pool off, INVALID_CONFIG fails the record, THROTTLED retries with the same requestId,
UNKNOWN retries a bounded number of times.

Stdlib only: nothing here imports google-api-core; errors are read by attribute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from corral.domain.errors import LaunchError, LaunchErrorClass

_C = LaunchErrorClass

GCE_ERRORS: Mapping[str, LaunchErrorClass] = MappingProxyType(
    {
        # No capacity for this machine/GPU in this zone right now: try the next offering.
        "ZONE_RESOURCE_POOL_EXHAUSTED": _C.CAPACITY,
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": _C.CAPACITY,
        "RESOURCE_POOL_EXHAUSTED": _C.CAPACITY,
        "STOCKOUT": _C.CAPACITY,
        "resourceExhausted": _C.CAPACITY,
        "RESOURCE_EXHAUSTED": _C.CAPACITY,
        # Project / region quotas (CPUS, NVIDIA_T4_GPUS, PREEMPTIBLE_...): back the pool off.
        "QUOTA_EXCEEDED": _C.QUOTA,
        "quotaExceeded": _C.QUOTA,
        "dailyLimitExceeded": _C.QUOTA,
        "limitExceeded": _C.QUOTA,
        # Not allowed: IAM roles (instanceAdmin, serviceAccountUser), API not enabled.
        "forbidden": _C.PERMISSION,
        "insufficientPermissions": _C.PERMISSION,
        "accessNotConfigured": _C.PERMISSION,
        "authError": _C.PERMISSION,
        "PERMISSION_DENIED": _C.PERMISSION,
        "SERVICE_ACCOUNT_ACCESS_DENIED": _C.PERMISSION,
        # The launch config is wrong: image, network, machine or accelerator type, fields.
        "invalid": _C.INVALID_CONFIG,
        "badRequest": _C.INVALID_CONFIG,
        "required": _C.INVALID_CONFIG,
        "invalidParameter": _C.INVALID_CONFIG,
        "notFound": _C.INVALID_CONFIG,
        "INVALID_FIELD_VALUE": _C.INVALID_CONFIG,
        "REQUIRED_FIELD_MISSING": _C.INVALID_CONFIG,
        "RESOURCE_NOT_FOUND": _C.INVALID_CONFIG,
        "UNSUPPORTED_OPERATION": _C.INVALID_CONFIG,
        "INVALID_USAGE": _C.INVALID_CONFIG,
        "BaseConfigInvalid": _C.INVALID_CONFIG,  # ours: base_config is not an Instance
        "StartupScriptTooLarge": _C.INVALID_CONFIG,  # ours: over GCE's metadata limit
        "InstanceNameTaken": _C.INVALID_CONFIG,  # ours: the name belongs to someone else
        # ours, for a start: the VM is not ours, unknown or being deleted; or it is SUSPENDED
        # (Corral never suspends: a VM with GPUs cannot be suspended), which start cannot undo.
        "InstanceNotFound": _C.INVALID_CONFIG,
        "InstanceNotStartable": _C.INVALID_CONFIG,
        # API rate limits: retry the same attempt (same requestId: never a second VM).
        "rateLimitExceeded": _C.THROTTLED,
        "userRateLimitExceeded": _C.THROTTLED,
        "RATE_LIMIT_EXCEEDED": _C.THROTTLED,
        "tooManyRequests": _C.THROTTLED,
        # The VM is in the middle of another operation (a stop still running): retry soon.
        "resourceNotReady": _C.THROTTLED,
        "InstanceStopping": _C.THROTTLED,  # ours: start asked while the VM is still stopping
        # GCE's own trouble.
        "backendError": _C.UNKNOWN,
        "internalError": _C.UNKNOWN,
        "INTERNAL_ERROR": _C.UNKNOWN,
        "SERVICE_UNAVAILABLE": _C.UNKNOWN,
        "OperationTimeout": _C.UNKNOWN,  # ours: the operation outlived our wait
    }
)


def classify(codes: Iterable[str], http_status: int | None = None) -> LaunchErrorClass:
    """The class of the first known reason/code, else of the HTTP status."""
    for code in codes:
        found = GCE_ERRORS.get(code)
        if found is not None:
            return found
    status = http_status or 0
    if status == 429:
        return _C.THROTTLED
    if status in (401, 403):
        return _C.PERMISSION
    if status in (400, 404, 409, 412):
        return _C.INVALID_CONFIG
    return _C.UNKNOWN


def our_error(code: str, message: str) -> LaunchError:
    """A refusal Corral itself decides (a code of ours in the table), classified there."""
    return LaunchError(classify([code]), code, message)


def _reasons(error: Any) -> list[str]:
    """``errors[].reason`` of an api-core exception (dicts from the REST envelope)."""
    found = []
    for detail in getattr(error, "errors", None) or ():
        reason = detail.get("reason") if isinstance(detail, Mapping) else None
        if isinstance(reason, str) and reason:
            found.append(reason)
    reason = getattr(error, "reason", None)  # ErrorInfo.reason, when Google sends one
    if isinstance(reason, str) and reason:
        found.append(reason)
    return found


def launch_error_from_api(error: Any) -> LaunchError:
    """A ``google.api_core.exceptions.GoogleAPICallError`` as a classified LaunchError."""
    status = getattr(error, "code", None)
    reasons = _reasons(error)
    error_class = classify(reasons, status if isinstance(status, int) else None)
    code = reasons[0] if reasons else f"HTTP{status}"
    return LaunchError(error_class, code, str(getattr(error, "message", "") or error))


def launch_error_from_operation(operation: Any) -> LaunchError | None:
    """The error a finished ``compute_v1.Operation`` reports, or None when it succeeded."""
    details = list(getattr(getattr(operation, "error", None), "errors", None) or ())
    if not details:
        return None
    codes = [str(d.code) for d in details if getattr(d, "code", "")]
    message = "; ".join(str(d.message) for d in details if getattr(d, "message", ""))
    status = getattr(operation, "http_error_status_code", None) or None
    error_class = classify(codes, status)
    return LaunchError(error_class, codes[0] if codes else "OperationFailed", message)


__all__ = [
    "GCE_ERRORS",
    "classify",
    "launch_error_from_api",
    "launch_error_from_operation",
    "our_error",
]
