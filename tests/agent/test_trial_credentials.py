"""A trial's own credentials: the agent assumes the trial role (moto STS) per trial and serves
the result on its container-credentials endpoint, to that trial's token only. A real boto3
session in this process, given only what a trial is given (``AWS_CONTAINER_CREDENTIALS_FULL_URI``
and ``AWS_CONTAINER_AUTHORIZATION_TOKEN``), obtains the trial's session of the trial role."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.utils import ContainerMetadataFetcher
from moto import mock_aws

from agent_runtime.config import AgentConfig
from agent_runtime.main import build_agent
from agent_runtime.trial_credentials import (
    SHADOWING_ENV,
    TOKEN_ENV,
    URI_ENV,
    CredentialServer,
    Grant,
    TrialRoleSource,
    TrialScope,
    session_name,
    session_policy,
)
from tests.agent.conftest import (
    FakeClock,
    FakeControlPlane,
    FakeSleeper,
    assignment,
    ec2_values,
)

REGION = "us-east-1"
TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::123456789012:role/agent"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
            }
        ],
    }
)
SCOPE = TrialScope("t-1", "exp-1", "s3://ckpt/team/exp-1/t-1")


class RecordingSts:
    """moto's STS, with each AssumeRole request kept for the test to read."""

    def __init__(self, sts: Any) -> None:
        self._sts = sts
        self.calls: list[dict[str, Any]] = []

    def assume_role(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self._sts.assume_role(**kwargs)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[str, RecordingSts]]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    # No profile on this machine may stand in for the endpoint (botocore reads the shared
    # files before the container provider).
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    # Set here, so moto restores (not deletes) them at its end: tests delete them.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        iam = boto3.client("iam", region_name=REGION)
        arn = iam.create_role(RoleName="corral-trial", AssumeRolePolicyDocument=TRUST)["Role"][
            "Arn"
        ]
        yield arn, RecordingSts(boto3.client("sts", region_name=REGION))


@pytest.fixture
def server(aws: tuple[str, RecordingSts]) -> Iterator[CredentialServer]:
    arn, sts = aws
    served = CredentialServer(TrialRoleSource(arn, sts), port=0)
    served.start()
    yield served
    served.close()


def _as_trial(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> boto3.Session:
    """A fresh boto3 session that sees what a trial sees: the endpoint, no other keys."""
    for name in (*SHADOWING_ENV, URI_ENV, TOKEN_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return boto3.Session(region_name=REGION)


def _get(url: str, token: str | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, headers={"Authorization": token} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_boto3_session_given_the_trials_env_gets_the_trials_role_session(
    server: CredentialServer, aws: tuple[str, RecordingSts], monkeypatch: pytest.MonkeyPatch
) -> None:
    grant = server.grant(SCOPE)
    env = grant.env("loopback")
    assert env[URI_ENV] == f"http://127.0.0.1:{server.port}/v1/credentials"
    session = _as_trial(monkeypatch, env)
    creds = session.get_credentials()
    assert creds is not None and creds.method == "container-role"
    # moto knows whose keys these are: the trial's session of the trial role.
    who = session.client("sts").get_caller_identity()
    assert who["Arn"] == "arn:aws:sts::123456789012:assumed-role/corral-trial/trial-t-1"
    (call,) = aws[1].calls
    assert call["RoleArn"] == aws[0] and call["RoleSessionName"] == "trial-t-1"
    assert call["DurationSeconds"] == 3600
    assert {t["Key"]: t["Value"] for t in call["Tags"]} == {
        "corral-trial": "t-1",
        "corral-experiment": "exp-1",
    }
    assert call["Policy"] == session_policy(SCOPE)


def test_the_endpoint_answers_only_the_trials_own_token(server: CredentialServer) -> None:
    mine = server.grant(SCOPE)
    theirs = server.grant(TrialScope("t-2", "exp-1", "s3://ckpt/team/exp-1/t-2"))
    url = mine.env("loopback")[URI_ENV]
    assert _get(url, None)[0] == 401
    assert _get(url, "not-a-token")[0] == 403
    assert _get(url + "/../../latest/meta-data", mine.token)[0] in (403, 404)
    status, body = _get(url, mine.token)
    assert status == 200
    assert set(body) >= {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"}
    assert body["RoleArn"].endswith("/trial-t-1")
    status, other = _get(url, theirs.token)
    assert status == 200 and other["AccessKeyId"] != body["AccessKeyId"]
    assert other["RoleArn"].endswith("/trial-t-2")
    # Once its run is cleaned up, a trial's token is dead.
    server.revoke("t-1")
    assert _get(url, mine.token)[0] == 403
    assert _get(url, theirs.token)[0] == 200


def test_a_rerun_of_a_trial_kills_its_old_token(server: CredentialServer) -> None:
    first = server.grant(SCOPE)
    second = server.grant(SCOPE)
    assert _get(first.env("loopback")[URI_ENV], first.token)[0] == 403
    assert _get(second.env("loopback")[URI_ENV], second.token)[0] == 200


def test_credentials_are_cached_until_near_expiry_then_renewed(
    aws: tuple[str, RecordingSts],
) -> None:
    arn, sts = aws
    now = [datetime.now(UTC).timestamp()]
    source = TrialRoleSource(arn, sts, now=lambda: now[0], refresh_before_s=300)
    first = source.credentials(SCOPE)
    assert source.credentials(SCOPE) is first and len(sts.calls) == 1
    now[0] = first.expiration.timestamp() - 301  # still fresh enough
    assert source.credentials(SCOPE) is first
    now[0] = first.expiration.timestamp() - 299  # inside the refresh window
    renewed = source.credentials(SCOPE)
    assert len(sts.calls) == 2 and renewed.access_key_id != first.access_key_id


def test_sts_failure_is_a_502_the_sdk_retries() -> None:
    class Refusing:
        def assume_role(self, **kwargs: Any) -> Any:
            raise RuntimeError("AccessDenied")

    served = CredentialServer(
        TrialRoleSource("arn:aws:iam::123456789012:role/x", Refusing()), port=0
    )
    served.start()
    try:
        grant = served.grant(SCOPE)
        status, body = _get(grant.env("loopback")[URI_ENV], grant.token)
    finally:
        served.close()
    assert status == 502 and "AccessDenied" in body["message"]


def test_the_bridge_uri_is_ecs_address_which_sdks_accept_and_the_gateway_would_not_be(
    server: CredentialServer,
) -> None:
    assert server.grant(SCOPE).env("bridge") == {}  # no bridge listener: nothing, not ours
    server.listen_on_bridge("127.0.0.2")  # stands in for the bridge gateway (DNAT target)
    grant = server.grant(SCOPE)
    assert grant.env("bridge") == {
        URI_ENV: "http://169.254.170.2/v1/credentials",
        TOKEN_ENV: grant.token,
    }
    # What the DNAT rule forwards to answers too.
    assert _get(f"http://127.0.0.2:{server.port}/v1/credentials", grant.token)[0] == 200
    # botocore's rule (the other SDKs have the same list): ECS's address and loopback pass,
    # a bridge gateway address does not, which is why bridge trials go through the DNAT.
    fetcher = ContainerMetadataFetcher()
    fetcher._validate_allowed_url(grant.env("bridge")[URI_ENV])
    fetcher._validate_allowed_url(grant.env("loopback")[URI_ENV])
    with pytest.raises(ValueError, match="Unsupported host"):
        fetcher._validate_allowed_url(f"http://172.17.0.1:{server.port}/v1/credentials")


def test_session_names_and_policies() -> None:
    assert session_name("t-1") == "trial-t-1"
    assert session_name("a b/c") == "trial-a-b-c"
    long = session_name("x" * 100)
    assert len(long) == 64 and long.startswith("trial-xxx")
    assert session_name("x" * 100) != session_name("x" * 99)
    policy = json.loads(session_policy(SCOPE, "aws-cn") or "")
    statements = {s["Sid"]: s for s in policy["Statement"]}
    assert statements["ExperimentCheckpoints"]["Resource"] == "arn:aws-cn:s3:::ckpt/team/exp-1/*"
    assert statements["ListExperimentCheckpoints"]["Condition"] == {
        "StringLike": {"s3:prefix": ["team/exp-1/*"]}
    }
    # Other buckets (the data) stay as the role allows: the session policy only narrows
    # the checkpoint bucket.
    assert statements["OtherBuckets"]["NotResource"] == [
        "arn:aws-cn:s3:::ckpt",
        "arn:aws-cn:s3:::ckpt/*",
    ]
    assert session_policy(TrialScope("t-1", "e", "file:///tmp/c/e/t-1")) is None
    no_prefix = json.loads(session_policy(TrialScope("t-1", "e", "s3://b/e/t-1")) or "")
    assert no_prefix["Statement"][0]["Resource"] == "arn:aws:s3:::b/e/*"


# ---- through the agent: a process trial reads its own credentials -----------------------------
READ_CREDENTIALS = """
import json, os, boto3
creds = boto3.Session().get_credentials().get_frozen_credentials()
print(json.dumps({"key": creds.access_key, "secret": creds.secret_key, "token": creds.token,
                  "instance_key_seen": os.environ.get("AWS_ACCESS_KEY_ID")}))
"""


def test_the_agent_hands_each_trial_its_own_credentials_and_revokes_them(
    aws: tuple[str, RecordingSts],
    plane: FakeControlPlane,
    clock: FakeClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arn, sts = aws
    # The agent's own environment holds "instance" keys: the trial must not see them.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAINSTANCEKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "instance-secret")
    monkeypatch.setenv("HOME", str(tmp_path))
    script = tmp_path / "trial.py"
    script.write_text(READ_CREDENTIALS)
    plane.heartbeat_replies.append(
        {"start": [assignment("t-1", [sys.executable, "-u", str(script)])]}
    )
    config = AgentConfig.model_validate(
        {
            "api_url": plane.url,
            "dev_token": "dev-secret",
            "dev_instance_id": "i-dev",
            "executor": "process",
            "work_dir": str(tmp_path / "work"),
            "shutdown_command": ["true"],
            "agent_reconnect_attempts": 0,
            "fake_gpus": 2,
            "trial_role_arn": arn,
            "trial_credentials_port": 0,
        }
    )
    agent = build_agent(config, clock, FakeSleeper(clock), sts=sts, guard_runner=_no_iptables)
    credentials = agent.credentials
    assert credentials is not None
    granted: list[Grant] = []
    grant = credentials.grant
    monkeypatch.setattr(
        credentials, "grant", lambda scope: granted.append(grant(scope)) or granted[-1]
    )
    try:
        deadline = time.monotonic() + 20
        while not any(s["state"] == "exited" for s in plane.statuses("t-1")) or not [
            x for x in plane.log_lines("t-1") if x.startswith("{")
        ]:
            assert time.monotonic() < deadline, (
                [r.path for r in plane.requests],
                plane.statuses("t-1"),
                plane.log_lines("t-1"),
            )
            agent.run_once()
            clock.advance(1.0)
            time.sleep(0.02)
        seen = json.loads(next(x for x in plane.log_lines("t-1") if x.startswith("{")))
        assert seen["instance_key_seen"] is None
        assert seen["key"] != "AKIAINSTANCEKEY"
        trial_sts = boto3.client(
            "sts",
            region_name=REGION,
            aws_access_key_id=seen["key"],
            aws_secret_access_key=seen["secret"],
            aws_session_token=seen["token"],
        )
        assert trial_sts.get_caller_identity()["Arn"].endswith(
            "assumed-role/corral-trial/trial-t-1"
        )
        # Reported and forgotten: the trial's token no longer answers.
        while agent.trials:
            assert time.monotonic() < deadline
            agent.run_once()
            clock.advance(5.0)
            time.sleep(0.02)
        (only,) = granted
        assert only.trial_id == "t-1"
        assert credentials.answer(only.token)[0] == 403
    finally:
        credentials.close()


def _no_iptables(argv: Any) -> tuple[int, str]:
    raise AssertionError(f"a dev agent applies no firewall rules: {argv}")


# ---- where the role comes from -------------------------------------------------------------
@pytest.mark.parametrize(
    ("configured", "replied", "used"),
    [
        (None, "arn:aws:iam::123456789012:role/stack-TrialRole-1", "stack-TrialRole-1"),
        ("arn:aws:iam::123456789012:role/mine", "arn:aws:iam::123456789012:role/theirs", "mine"),
        (None, "not-an-arn", None),
        (None, None, None),
    ],
)
def test_an_ec2_agent_takes_the_trial_role_the_control_plane_names(
    aws: tuple[str, RecordingSts],
    make_agent: Any,
    plane: FakeControlPlane,
    metadata: Any,
    configured: str | None,
    replied: str | None,
    used: str | None,
) -> None:
    metadata.values.update(ec2_values())
    plane.register_reply["trial_role_arn"] = replied
    h = make_agent(cloud="ec2", ec2_metadata_url=metadata.url, trial_role_arn=configured)
    credentials = h.agent.credentials
    assert credentials is not None and credentials.ready is (configured is not None)
    h.step_until(lambda: h.agent.agent_id is not None)
    assert credentials.ready is (used is not None)
    if used is not None:
        status, body = credentials.answer(credentials.grant(SCOPE).token)
        assert status == 200 and body["RoleArn"].split("/")[-2] == used


def test_a_dev_agent_without_a_trial_role_serves_nothing(make_agent: Any) -> None:
    assert make_agent().agent.credentials is None
