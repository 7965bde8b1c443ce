"""A GCE trial's own credentials: access tokens of the deployment's trial service account,
served on a metadata-server look-alike (credential_server.py routes the requests).

The agent's own account (the instance's) holds ``roles/iam.serviceAccountTokenCreator`` on
the trial account only (infra/gcp/deploy.sh): it mints a token per trial with
``iamcredentials.generateAccessToken`` and hands it out on the paths Google's client
libraries read (google-auth's ``compute_engine`` credentials, and the Go and Java
libraries alike): ``instance/service-accounts/{default|<email>}/{token,email,?recursive}``,
``project/project-id``, ``universe/universe-domain``, and the root ping. Nothing else of the
instance's metadata is served.

The trial finds it through ``GCE_METADATA_HOST`` and ``GCE_METADATA_IP``: clients build
``http://$GCE_METADATA_HOST/computeMetadata/v1/...`` from it, so its value carries the
trial's token as a path prefix (``<address>:<port>/trial/<token>``); the metadata protocol
has no authorization header. Unlike the AWS SDKs, google-auth accepts any host, so a
bridge trial is pointed at the listener on the bridge gateway directly (no DNAT).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

from agent_runtime.config import AgentConfig
from agent_runtime.credential_server import Reply, TrialScope

log = logging.getLogger(__name__)

HOST_ENV, IP_ENV = "GCE_METADATA_HOST", "GCE_METADATA_IP"
IAM_CREDENTIALS_URL = "https://iamcredentials.googleapis.com"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)  # the account's roles limit it
LIFETIME_S = 3600
REFRESH_BEFORE_S = 300.0
FLAVOR = {"Metadata-Flavor": "Google"}
ROOT = "/computeMetadata/v1"

# (url, json body, headers) -> the parsed JSON reply; raises on a non-2xx answer.
Post = Callable[[str, dict[str, Any], dict[str, str]], dict[str, Any]]


@dataclass(frozen=True)
class Token:
    access_token: str
    expires_at: float  # epoch seconds


def trial_account_for(agent_account: str) -> str | None:
    """The deployment's naming (deploy.sh): ``corral-agent@P`` -> ``corral-trial@P``."""
    local, _, domain = agent_account.partition("@")
    return f"corral-trial@{domain}" if local == "corral-agent" and domain else None


class GceTrialSource:
    dnat_ecs_address = False

    def __init__(
        self,
        account: str | None,
        project: str,
        agent_token: Callable[[], str],
        post: Post,
        iam_url: str = IAM_CREDENTIALS_URL,
        now: Callable[[], float] = time.time,
        refresh_before_s: float = REFRESH_BEFORE_S,
    ) -> None:
        self.account = account
        self.project = project
        self._agent_token = agent_token
        self._post = post
        self._iam_url = iam_url.rstrip("/")
        self._now = now
        self._refresh_before_s = refresh_before_s
        self._cache: dict[str, Token] = {}
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.account is not None

    def adopt(self, account: str) -> None:
        with self._lock:
            if self.account is None:
                self.account = account

    def forget(self, trial_id: str) -> None:
        with self._lock:
            self._cache.pop(trial_id, None)

    def environment(
        self, token: str, port: int, bridge_address: str | None
    ) -> tuple[dict[str, str], dict[str, str] | None]:
        def at(address: str) -> dict[str, str]:
            host = f"{address}:{port}/trial/{token}"
            return {HOST_ENV: host, IP_ENV: host}

        return at("127.0.0.1"), at(bridge_address) if bridge_address else None

    def token(self, scope: TrialScope) -> Token:
        with self._lock:
            cached = self._cache.get(scope.trial_id)
            if cached is not None and cached.expires_at - self._now() > self._refresh_before_s:
                return cached
            fresh = self._mint()
            self._cache[scope.trial_id] = fresh
            return fresh

    def _mint(self) -> Token:
        if self.account is None:
            raise RuntimeError("no trial service account known yet")
        url = f"{self._iam_url}/v1/projects/-/serviceAccounts/{self.account}:generateAccessToken"
        reply = self._post(
            url,
            {"scope": list(SCOPES), "lifetime": f"{LIFETIME_S}s"},
            {"Authorization": f"Bearer {self._agent_token()}"},
        )
        expires = datetime.fromisoformat(str(reply["expireTime"]).replace("Z", "+00:00"))
        return Token(str(reply["accessToken"]), expires.timestamp())

    def serve(self, scope: TrialScope, path: str, headers: Mapping[str, str]) -> Reply:
        url = urlparse(path)
        route = url.path.rstrip("/")
        if route == "":
            return 200, dict(FLAVOR), ""  # the ping clients send to detect GCE
        if headers.get("metadata-flavor") != "Google":
            return 403, {}, "Missing Metadata-Flavor: Google header"
        if route == f"{ROOT}/project/project-id":
            return 200, dict(FLAVOR), self.project
        if route == f"{ROOT}/universe/universe-domain":
            return 200, dict(FLAVOR), "googleapis.com"
        prefix = f"{ROOT}/instance/service-accounts/"
        if not route.startswith(prefix):
            return 404, {}, "not found"
        account, _, what = route[len(prefix) :].partition("/")
        if account not in ("default", self.account):
            return 404, {}, "not found"
        email = self.account or ""
        if what == "" and parse_qs(url.query).get("recursive") == ["true"]:
            info = {"email": email, "scopes": list(SCOPES), "aliases": ["default"]}
            return 200, dict(FLAVOR), info
        if what == "email":
            return 200, dict(FLAVOR), email
        if what == "token":
            token = self.token(scope)
            expires_in = max(0, int(token.expires_at - self._now()))
            reply = {"access_token": token.access_token, "expires_in": expires_in}
            return 200, dict(FLAVOR), {**reply, "token_type": "Bearer"}
        return 404, {}, "not found"


def requests_post(session: Any, timeout_s: float) -> Post:
    """``Post`` over a requests session (the agent's own dependency)."""

    def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        reply = session.post(url, data=json.dumps(body), headers=headers, timeout=timeout_s)
        if reply.status_code // 100 != 2:
            raise RuntimeError(f"{url}: HTTP {reply.status_code}: {reply.text[:300]}")
        return dict(reply.json())

    return post


def gce_source(config: AgentConfig) -> GceTrialSource:
    """The source for this GCE agent: its own token and project from its metadata server,
    the trial account from ``trial_service_account`` or the deployment's naming."""
    import requests

    metadata = requests.Session()
    metadata.trust_env = False  # link-local metadata never goes through a proxy
    base = config.gce_metadata_url.rstrip("/") + ROOT

    def read(path: str) -> str:
        reply = metadata.get(f"{base}/{path}", headers=FLAVOR, timeout=config.metadata_timeout_s)
        reply.raise_for_status()
        return str(reply.text)

    def agent_token() -> str:
        return str(json.loads(read("instance/service-accounts/default/token"))["access_token"])

    iam = requests.Session()  # the IAM API goes through the agent's proxy, if any
    iam.proxies.update({k: v for k, v in (("https", config.https_proxy),) if v})
    account = config.trial_service_account or trial_account_for(
        read("instance/service-accounts/default/email")
    )
    if account is None:
        log.warning("no trial_service_account: GCE trials get no credentials from the agent")
    return GceTrialSource(
        account,
        read("project/project-id"),
        agent_token,
        requests_post(iam, config.request_timeout_s),
        iam_url=config.gce_iam_credentials_url,
    )
