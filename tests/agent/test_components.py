"""Config loading, the trial environment, the startup wrapper, SigV4 and GCE identity."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_runtime.client import (
    BearerAuth,
    ControlPlaneClient,
    ControlPlaneError,
    SigV4Auth,
    Unreachable,
)
from agent_runtime.config import AgentConfig, load_config
from agent_runtime.executors.process import process_env
from agent_runtime.identity import GceMetadata
from agent_runtime.interruptions import grace_for
from agent_runtime.trial_env import checkpoint_dir, trial_env
from corral.protocol.agent import (
    HeartbeatRequest,
    Identity,
    IdentityKind,
    RegisterRequest,
    TrialAssignment,
)
from tests.agent.conftest import FakeClock, FakeControlPlane, FakeMetadata, FakeSleeper


def test_config_file_then_env_overrides(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "api_url: http://cp\nauth: dev\ndev_token: a\ndev_instance_id: i-1\n"
        "agent_reconnect_attempts: 2\nfuture_key: 1\n"
    )
    env = {
        "CORRAL_AGENT_AGENT_RECONNECT_ATTEMPTS": "7",
        "CORRAL_AGENT_SHUTDOWN_COMMAND": '["touch", "/tmp/x"]',
        "CORRAL_AGENT_RUN_AS_UID": "1000",
        "CORRAL_AGENT_HTTP_PROXY": "http://p:3128",
    }
    config = load_config(path, env)
    assert config.agent_reconnect_attempts == 7
    assert config.shutdown_command == ["touch", "/tmp/x"]
    assert config.run_as_uid == 1000
    assert config.proxy_env()["HTTP_PROXY"] == "http://p:3128"
    assert "a" not in repr(config.dev_token)  # the token never shows in logs
    with pytest.raises(ValueError, match="dev_token"):
        load_config(None, {"CORRAL_AGENT_API_URL": "http://cp", "CORRAL_AGENT_CONFIG": ""})


def _assignment(**kw: object) -> TrialAssignment:
    base: dict[str, object] = {
        "trial_id": "t",
        "experiment_id": "e",
        "entrypoint": ["x"],
        "gpus": [4, 5],
        "checkpoint": {"storage_uri": "gs://b/e/t", "latest": "gs://b/e/t/step-3"},
        "environment": {"CORRAL_TRIAL_ID": "spoofed", "NCCL_DEBUG": "INFO"},
        "rendezvous": {
            "master_addr": "10.0.0.1",
            "master_port": 12355,
            "world_size": 8,
            "node_rank": 2,
            "nnodes": 4,
            "local_world_size": 2,
        },
    }
    base.update(kw)
    return TrialAssignment.model_validate(base)


def test_trial_env_in_container_with_rendezvous(tmp_path: Path) -> None:
    a = _assignment()
    ckpt = checkpoint_dir(a, tmp_path)
    assert ckpt == tmp_path / "trials/t/checkpoints"  # remote storage: a local staging dir
    env = trial_env(a, agent_id="rec-1", checkpoint_path=ckpt, proxies={}, in_container=True)
    assert env["CORRAL_TRIAL_ID"] == "t" and env["NCCL_DEBUG"] == "INFO"
    assert env["CORRAL_CHECKPOINT_URI"] == "gs://b/e/t"
    assert env["CORRAL_LATEST_CHECKPOINT"] == "gs://b/e/t/step-3"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["NVIDIA_VISIBLE_DEVICES"] == "4,5"
    torch = {
        k: env[k]
        for k in (
            "MASTER_ADDR",
            "MASTER_PORT",
            "WORLD_SIZE",
            "NODE_RANK",
            "NNODES",
            "LOCAL_WORLD_SIZE",
            "RANK",
        )
    }
    assert torch == {
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "12355",
        "WORLD_SIZE": "8",
        "NODE_RANK": "2",
        "NNODES": "4",
        "LOCAL_WORLD_SIZE": "2",
        "RANK": "4",
    }
    local = _assignment(checkpoint={"storage_uri": "file:///mnt/ckpt/e/t"})
    assert checkpoint_dir(local, tmp_path) == Path("/mnt/ckpt/e/t")


def test_sigv4_headers_in_aws_mode(plane: FakeControlPlane) -> None:
    import boto3

    session = boto3.Session(
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        aws_session_token="session-token",
        region_name="us-east-1",
    )
    clock = FakeClock()
    client = ControlPlaneClient(plane.url, SigV4Auth("us-east-1", session), FakeSleeper(clock))
    client.heartbeat("rec-1", HeartbeatRequest())
    headers = plane.posts("/heartbeat")[0].headers
    auth = headers["Authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-east-1/execute-api/aws4_request" in auth and "Signature=" in auth
    assert headers["X-Amz-Security-Token"] == "session-token"
    assert "X-Amz-Date" in headers


def test_gce_identity_token_and_preemption_notice(metadata: FakeMetadata) -> None:
    base = "/computeMetadata/v1/instance/"
    metadata.values.update(
        {
            base + "name": "corral-agent-x1",
            base + "zone": "projects/123/zones/us-central1-a",
            base + "machine-type": "projects/123/machineTypes/a2-highgpu-1g",
            base + "scheduling/preemptible": "TRUE",
            base + "service-accounts/default/identity": "header.payload.sig",
            base + "preempted": "FALSE",
        }
    )
    config = AgentConfig(api_url="https://cp", auth="gce", gce_metadata_url=metadata.url)
    source = GceMetadata(config, FakeClock())
    identity = source.identity()
    assert identity.cloud_id == "corral-agent-x1"
    assert (identity.zone, identity.instance_type, identity.capacity_type) == (
        "us-central1-a",
        "a2-highgpu-1g",
        "spot",
    )
    assert identity.identity.kind == "gce" and identity.identity.document == "header.payload.sig"
    token_get = next(r for r in metadata.seen if "identity" in r.path)
    assert "audience=https%3A%2F%2Fcp" in token_get.path and "format=full" in token_get.path
    assert token_get.headers["Metadata-Flavor"] == "Google"
    assert source.notice() is None
    metadata.values[base + "preempted"] = "TRUE"
    notice = source.notice()
    assert notice is not None and notice.window_s == 30
    assert grace_for(notice, config.interruption_margin_s) == 20


def test_client_does_not_retry_refusals_and_backs_off_on_5xx(plane: FakeControlPlane) -> None:
    clock = FakeClock()
    sleeper = FakeSleeper(clock)
    client = ControlPlaneClient(
        plane.url, BearerAuth(lambda: "t", clock), sleeper, attempts=3, backoff_s=2, max_backoff_s=5
    )
    plane.down = True
    with pytest.raises(Unreachable):
        client.register(_register())
    assert len(sleeper.slept) == 3 and all(0 <= s <= 5 for s in sleeper.slept)
    plane.down, plane.register_status = False, 404
    with pytest.raises(ControlPlaneError) as err:
        client.register(_register())
    assert err.value.status == 404 and err.value.message == "refused"


def _register() -> RegisterRequest:
    return RegisterRequest(
        cloud_id="i-1",
        identity=Identity(kind=IdentityKind.DEV, document="t"),
        instance_type="x",
        zone="z",
    )


def test_control_plane_proxy_honours_no_proxy() -> None:
    from agent_runtime.main import _proxies

    base = {"api_url": "https://api.internal:8443", "dev_token": "t", "dev_instance_id": "i"}
    proxied = AgentConfig.model_validate({**base, "https_proxy": "http://p:3128"})
    assert _proxies(proxied) == {"https": "http://p:3128"}
    bypass = AgentConfig.model_validate(
        {**base, "https_proxy": "http://p:3128", "no_proxy": ".internal"}
    )
    assert _proxies(bypass) is None


def test_a_process_trial_keeps_the_hosts_python_path_behind_the_helper() -> None:
    host = {"PYTHONPATH": "/opt/site", "HOME": "/root", "CORRAL_AGENT_DEV_TOKEN": "secret"}
    trial = {"PYTHONPATH": "/helper:/user", "CORRAL_TRIAL_ID": "t1"}
    env = process_env(host, trial)
    assert env["PYTHONPATH"] == "/helper:/user:/opt/site"
    assert env["HOME"] == "/root" and env["CORRAL_TRIAL_ID"] == "t1"
    assert "CORRAL_AGENT_DEV_TOKEN" not in env  # the agent's own settings stay private
    assert process_env({}, trial)["PYTHONPATH"] == "/helper:/user"
