"""A GCE trial's own credentials: the agent mints tokens of the trial service account (a fake
IAM Credentials API on loopback, called with the agent's own metadata token) and serves them
on a metadata-server look-alike. A real google-auth, in a process given only what a trial is
given (``GCE_METADATA_HOST``/``GCE_METADATA_IP``), finds "GCE" there and gets the trial's
token, project and account."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent_runtime.config import AgentConfig
from agent_runtime.credential_server import CredentialServer, TrialScope
from agent_runtime.main import apply_metadata_guard
from agent_runtime.trial_credentials_gce import (
    HOST_ENV,
    IP_ENV,
    gce_source,
    trial_account_for,
)
from tests.agent.conftest import FakeMetadata, _serve
from tests.agent.test_metadata_guard import BRIDGE, HOST, FakeIptables
from tests.agent.test_trial_credentials_executors import FakeClient
from tests.fakes.http import QuietHandler, send_json

AGENT_SA = "corral-agent@proj-1.iam.gserviceaccount.com"
TRIAL_SA = "corral-trial@proj-1.iam.gserviceaccount.com"
SCOPE = TrialScope("t-1", "exp-1", "gs://ckpt/exp-1/t-1")
M = "/computeMetadata/v1/"


class FakeIamCredentials:
    """generateAccessToken: a new token per call, for the agent's bearer token only."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.calls.append((self.path, self.headers.get("Authorization", ""), body))
                    n = len(fake.calls)
                if self.headers.get("Authorization") != "Bearer agent-token-1":
                    send_json(self, 401, {"error": {"message": "bad token"}})
                    return
                expires = datetime.now(UTC) + timedelta(hours=1)
                send_json(
                    self,
                    200,
                    {"accessToken": f"ya29.trial-{n}", "expireTime": expires.isoformat()},
                )

        self.server, self.url = _serve(Handler)


@pytest.fixture
def iam() -> Iterator[FakeIamCredentials]:
    fake = FakeIamCredentials()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture
def server(metadata: FakeMetadata, iam: FakeIamCredentials) -> Iterator[CredentialServer]:
    metadata.values.update(
        {
            M + "instance/service-accounts/default/token": json.dumps(
                {"access_token": "agent-token-1", "expires_in": 3599, "token_type": "Bearer"}
            ),
            M + "instance/service-accounts/default/email": AGENT_SA,
            M + "project/project-id": "proj-1",
        }
    )
    served = CredentialServer(gce_source(_config(metadata, iam)), port=0)
    served.start()
    yield served
    served.close()


def _config(metadata: FakeMetadata, iam: FakeIamCredentials) -> AgentConfig:
    return AgentConfig(
        api_url="http://cp",
        auth="gce",
        gce_metadata_url=metadata.url,
        gce_iam_credentials_url=iam.url,
    )


GOOGLE_AUTH = """
import json, google.auth, google.auth.transport.requests as transport
creds, project = google.auth.default()
creds.refresh(transport.Request())
print(json.dumps({"token": creds.token, "project": project,
                  "email": creds.service_account_email}))
"""


def _as_trial(env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GCE_", "GOOGLE_"))}
    clean.update(env, HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"))
    done = subprocess.run(
        [sys.executable, "-c", GOOGLE_AUTH],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_google_auth_given_the_trials_env_gets_the_trial_accounts_token(
    server: CredentialServer, iam: FakeIamCredentials, tmp_path: Path
) -> None:
    grant = server.grant(SCOPE)
    env = grant.env("loopback")
    assert env[HOST_ENV] == env[IP_ENV] == f"127.0.0.1:{server.port}/trial/{grant.token}"
    seen = _as_trial(env, tmp_path)
    assert seen == {"token": "ya29.trial-1", "project": "proj-1", "email": TRIAL_SA}
    (call,) = iam.calls
    path, bearer, body = call
    assert path == f"/v1/projects/-/serviceAccounts/{TRIAL_SA}:generateAccessToken"
    assert bearer == "Bearer agent-token-1"  # the agent's own token, from its metadata
    assert body == {
        "scope": ["https://www.googleapis.com/auth/cloud-platform"],
        "lifetime": "3600s",
    }


def test_only_the_trials_token_and_only_the_credential_paths_are_served(
    server: CredentialServer,
) -> None:
    mine = server.grant(SCOPE)
    theirs = server.grant(TrialScope("t-2", "exp-1", "gs://ckpt/exp-1/t-2"))
    flavor = {"metadata-flavor": "Google"}
    token_path = M + "instance/service-accounts/default/token"

    def get(token: str, path: str, headers: dict[str, str] = flavor) -> tuple[int, Any]:
        status, _, body = server.handle(f"/trial/{token}{path}", headers)
        return status, body

    status, body = get(mine.token, token_path)
    assert status == 200 and body["token_type"] == "Bearer"
    status, other = get(theirs.token, token_path)
    assert status == 200 and other["access_token"] != body["access_token"]
    assert get("guessed", token_path)[0] == 403
    assert get(mine.token, token_path, {})[0] == 403  # no Metadata-Flavor: Google
    # The instance's own metadata stays unserved: identity tokens, attributes, other accounts.
    for path in (
        M + "instance/service-accounts/default/identity?audience=x",
        M + "instance/attributes/startup-script",
        M + f"instance/service-accounts/{AGENT_SA}/token",
        M + "instance/name",
    ):
        assert get(mine.token, path)[0] == 404, path
    # The trial's token is cached, then dies with its run.
    assert get(mine.token, token_path)[1]["access_token"] == body["access_token"]
    server.revoke("t-1")
    assert get(mine.token, token_path)[0] == 403


def test_a_bridge_trial_is_pointed_at_the_gateway_and_no_dnat_rule_is_made(
    server: CredentialServer,
) -> None:
    server.listen_on_bridge("127.0.0.4")
    grant = server.grant(SCOPE)
    assert grant.env("bridge") == {
        HOST_ENV: f"127.0.0.4:{server.port}/trial/{grant.token}",
        IP_ENV: f"127.0.0.4:{server.port}/trial/{grant.token}",
    }
    config = AgentConfig(api_url="http://cp", auth="gce")  # the real metadata server
    applied = apply_metadata_guard(config, _docker(config), server, FakeIptables())
    assert applied == [BRIDGE, HOST]  # google-auth accepts any host: no 169.254.170.2 DNAT


def _docker(config: AgentConfig) -> Any:
    from agent_runtime.executors.docker import DockerExecutor

    return DockerExecutor(config, FakeClient())


def test_the_trial_account_follows_the_deployments_naming() -> None:
    assert trial_account_for(AGENT_SA) == TRIAL_SA
    assert trial_account_for("my-vm-sa@proj-1.iam.gserviceaccount.com") is None
    assert trial_account_for("123-compute@developer.gserviceaccount.com") is None
