"""HTTP client for the control plane's agent endpoints: authentication, timeouts, and retry
with exponential backoff and full jitter (so a fleet that lost the API at once does not come
back in lockstep)."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import requests
from pydantic import BaseModel

from agent_runtime.clock import Clock, Sleeper
from corral.protocol import agent as wire
from corral.protocol import agent_paths as paths

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

# 429 and 5xx are the control plane (or API Gateway) being busy or broken: retry them.
_RETRYABLE = {429, 500, 502, 503, 504}


class ControlPlaneError(Exception):
    """A definite refusal (4xx): retrying the same request will not help."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Unreachable(Exception):
    """No answer (or only 5xx/429) after every attempt."""


class Auth(Protocol):
    def headers(
        self, method: str, url: str, body: bytes, headers: dict[str, str]
    ) -> dict[str, str]:
        """The request headers with authentication added."""


class BearerAuth:
    """``dev``: a static token. ``gce``: an identity JWT from the metadata server, refreshed
    well before its one-hour lifetime ends."""

    REFRESH_S = 45 * 60

    def __init__(self, token: Callable[[], str], clock: Clock, refresh: bool = False) -> None:
        self._token_fn = token
        self._clock = clock
        self._refresh = refresh
        self._token: str | None = None
        self._fetched = 0.0

    def headers(
        self, method: str, url: str, body: bytes, headers: dict[str, str]
    ) -> dict[str, str]:
        now = self._clock.monotonic()
        if self._token is None or (self._refresh and now - self._fetched > self.REFRESH_S):
            self._token, self._fetched = self._token_fn(), now
        return {**headers, "Authorization": f"Bearer {self._token}"}


class SigV4Auth:
    """``aws``: every request SigV4-signed for ``execute-api`` with the instance profile's
    credentials; the control plane learns the instance id from the assumed-role session."""

    def __init__(self, region: str, session: Any = None) -> None:
        import boto3  # type: ignore[import-untyped,unused-ignore]  # lazy: EC2 agents only

        self._region = region
        self._session = session if session is not None else boto3.Session()

    def headers(
        self, method: str, url: str, body: bytes, headers: dict[str, str]
    ) -> dict[str, str]:
        from botocore.auth import SigV4Auth as _Signer  # type: ignore[import-untyped,unused-ignore]
        from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped,unused-ignore]

        credentials = self._session.get_credentials()
        if credentials is None:
            raise Unreachable("no AWS credentials (is an instance profile attached?)")
        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
        # Frozen: instance-profile credentials rotate; never sign with a half-updated set.
        _Signer(credentials.get_frozen_credentials(), "execute-api", self._region).add_auth(request)
        return dict(request.headers.items())


class ControlPlaneClient:
    def __init__(
        self,
        api_url: str,
        auth: Auth,
        sleeper: Sleeper,
        *,
        timeout_s: float = 10.0,
        attempts: int = 5,
        backoff_s: float = 5.0,
        max_backoff_s: float = 60.0,
        proxies: dict[str, str] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._base = api_url.rstrip("/")
        self._auth = auth
        self._sleeper = sleeper
        self._timeout = timeout_s
        self._attempts = attempts
        self._backoff = backoff_s
        self._max_backoff = max_backoff_s
        self._rng = rng or random.Random()
        self._http = requests.Session()
        if proxies:
            self._http.proxies.update(proxies)

    # --- endpoints -----------------------------------------------------------------------
    def register(self, request: wire.RegisterRequest) -> wire.RegisterResponse:
        return self._post(paths.REGISTER, request, wire.RegisterResponse, self._attempts + 1)

    def heartbeat(self, agent_id: str, request: wire.HeartbeatRequest) -> wire.HeartbeatResponse:
        # One attempt: the main loop is the retry, so notices and trials keep being watched.
        path = paths.HEARTBEAT.format(agent_id=agent_id)
        return self._post(path, request, wire.HeartbeatResponse, 1)

    def trial_status(self, agent_id: str, status: wire.TrialStatus) -> None:
        path = paths.TRIAL_STATUS.format(agent_id=agent_id, trial_id=status.trial_id)
        self._post_raw(path, status, 1)

    def logs(self, agent_id: str, trial_id: str, batch: wire.LogBatch) -> int:
        path = paths.TRIAL_LOGS.format(agent_id=agent_id, trial_id=trial_id)
        reply = self._post_raw(path, batch, 1)
        return int(reply.get("accepted", len(batch.lines))) if isinstance(reply, dict) else 0

    def backoff(self, failures: int) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2**failures)]."""
        ceiling = min(self._max_backoff, self._backoff * 2 ** max(0, failures))
        return self._rng.uniform(0, ceiling)

    # --- plumbing ------------------------------------------------------------------------
    def _post(self, path: str, body: BaseModel, reply_model: type[M], attempts: int) -> M:
        return reply_model.model_validate(self._post_raw(path, body, attempts))

    def _post_raw(self, path: str, body: BaseModel, attempts: int) -> Any:
        url = self._base + path
        payload = body.model_dump_json().encode()
        last: str = "no attempt made"
        for attempt in range(max(1, attempts)):
            if attempt:
                self._sleeper.sleep(self.backoff(attempt - 1))
            headers = self._auth.headers("POST", url, payload, {"Content-Type": "application/json"})
            try:
                reply = self._http.post(url, data=payload, headers=headers, timeout=self._timeout)
            except requests.RequestException as exc:
                last = f"{type(exc).__name__}: {exc}"
                log.debug("POST %s failed: %s", path, last)
                continue
            if reply.status_code in _RETRYABLE:
                last = f"HTTP {reply.status_code}"
                continue
            if reply.status_code >= 400:
                raise ControlPlaneError(reply.status_code, _message(reply))
            try:
                return reply.json() if reply.content else {}
            except ValueError:  # a proxy's HTML error page with a 200: treat as no answer
                last = f"HTTP {reply.status_code} with a body that is not JSON"
        raise Unreachable(f"POST {path}: {last}")


def _message(reply: requests.Response) -> str:
    try:
        body = reply.json()
    except json.JSONDecodeError:
        return reply.text[:500]
    if isinstance(body, dict) and "message" in body:
        return str(body["message"])
    return json.dumps(body)[:500]
