"""What each executor hands a trial for credentials: its own endpoint at an address its
network reaches, and never the instance's (no keys, no metadata address)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent_runtime.config import AgentConfig
from agent_runtime.executors import LaunchSpec
from agent_runtime.executors.docker import DockerExecutor
from agent_runtime.executors.process import process_env
from agent_runtime.trial_credentials import TOKEN_ENV, URI_ENV, Grant
from tests.agent.conftest import dev_config

LOOPBACK_URI = "http://127.0.0.1:51680/v1/credentials"
GRANT = Grant(
    trial_id="t-1",
    token="per-trial-secret",
    loopback={URI_ENV: LOOPBACK_URI, TOKEN_ENV: "per-trial-secret"},
    bridge={URI_ENV: "http://169.254.170.2/v1/credentials", TOKEN_ENV: "per-trial-secret"},
)
INSTANCE_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class FakeNetwork:
    def __init__(self, gateway: str) -> None:
        self.attrs = {
            "IPAM": {
                "Config": [
                    {"Subnet": "fd00::/64", "Gateway": "fd00::1"},
                    {"Subnet": "172.18.0.0/16", "Gateway": gateway},
                ]
            }
        }


class FakeClient:
    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.created: list[str] = []
        self.looked_up: list[str] = []
        outer = self

        class Containers:
            def run(self, **kw: Any) -> Any:
                outer.runs.append(kw)
                raise AssertionError("not launched in these tests")

        class Networks:
            def list(self, names: list[str]) -> list[str]:
                return [n for n in names if n in outer.created]

            def create(self, name: str, driver: str) -> None:
                outer.created.append(name)

            def get(self, name: str) -> FakeNetwork:
                outer.looked_up.append(name)
                return FakeNetwork("172.18.0.1")

        self.containers, self.networks = Containers(), Networks()


def _spec(tmp_path: Path, nodes: int = 1, credentials: Grant | None = GRANT) -> LaunchSpec:
    return LaunchSpec(
        trial_id="t-1",
        experiment_id="e-1",
        agent_id="rec-1",
        command=["python", "train.py"],
        env={"CORRAL_TRIAL_ID": "t-1", "PYTHONPATH": "/opt/corral/python"},
        gpus=[0],
        work_dir=tmp_path / "work",
        checkpoint_dir=tmp_path / "ckpt",
        image="pytorch:2",
        nodes=nodes,
        credentials=credentials,
    )


def ec2_config(**settings: Any) -> AgentConfig:
    return AgentConfig(api_url="http://cp", auth="aws", cloud="ec2", **settings)


def _never_the_instance(env: dict[str, str]) -> None:
    assert not [k for k in INSTANCE_KEYS if k in env]
    assert not [v for v in env.values() if "169.254.169.254" in v]


def test_a_bridge_trial_gets_ecs_address_and_its_token(tmp_path: Path) -> None:
    executor = DockerExecutor(ec2_config(agent_docker_network="corral"), FakeClient())
    kwargs = executor.run_kwargs(_spec(tmp_path))
    env = kwargs["environment"]
    assert kwargs["network"] == "corral" and "network_mode" not in kwargs
    assert env[URI_ENV] == "http://169.254.170.2/v1/credentials"
    assert env[TOKEN_ENV] == "per-trial-secret"
    _never_the_instance(env)
    # Outside system.slice: the metadata guard's OUTPUT rule covers it on a cloud instance.
    assert kwargs["cgroup_parent"] == "corral.slice"


def test_a_host_network_trial_gets_the_loopback_endpoint(tmp_path: Path) -> None:
    for config, nodes in (
        (ec2_config(agent_docker_network="corral"), 2),  # multi-agent: always the host
        (ec2_config(agent_docker_network="host"), 1),
    ):
        kwargs = DockerExecutor(config, FakeClient()).run_kwargs(_spec(tmp_path, nodes=nodes))
        env = kwargs["environment"]
        assert kwargs["network_mode"] == "host"
        assert env[URI_ENV] == "http://127.0.0.1:51680/v1/credentials"
        assert env[TOKEN_ENV] == "per-trial-secret"
        _never_the_instance(env)
        assert kwargs["cgroup_parent"] == "corral.slice"


def test_what_the_experiment_sets_itself_wins(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    own = {**spec.env, URI_ENV: "http://127.0.0.1:9/mine", TOKEN_ENV: "mine"}
    kwargs = DockerExecutor(ec2_config(), FakeClient()).run_kwargs(replace(spec, env=own))
    assert (kwargs["environment"][URI_ENV], kwargs["environment"][TOKEN_ENV]) == (
        "http://127.0.0.1:9/mine",
        "mine",
    )
    env = process_env({}, own, GRANT)
    assert (env[URI_ENV], env[TOKEN_ENV]) == ("http://127.0.0.1:9/mine", "mine")


def test_no_grant_no_credentials_and_a_dev_agent_keeps_dockers_cgroups(tmp_path: Path) -> None:
    kwargs = DockerExecutor(dev_config(), FakeClient()).run_kwargs(
        _spec(tmp_path, credentials=None)
    )
    assert URI_ENV not in kwargs["environment"] and TOKEN_ENV not in kwargs["environment"]
    assert "cgroup_parent" not in kwargs  # the guard is off on a developer's machine
    no_bridge = Grant("t-1", "tok", GRANT.loopback, bridge=None)
    kwargs = DockerExecutor(ec2_config(), FakeClient()).run_kwargs(
        _spec(tmp_path, credentials=no_bridge)
    )
    assert URI_ENV not in kwargs["environment"]  # nothing rather than something wrong


@pytest.mark.parametrize(
    ("network", "looked_up", "gateway"),
    [("corral", "corral", "172.18.0.1"), (None, "bridge", "172.18.0.1"), ("host", None, None)],
)
def test_bridge_gateway(network: str | None, looked_up: str | None, gateway: str | None) -> None:
    client = FakeClient()
    executor = DockerExecutor(ec2_config(agent_docker_network=network), client)
    assert executor.bridge_gateway() == gateway  # the IPv4 one
    assert client.looked_up == ([looked_up] if looked_up else [])
    assert client.created == (["corral"] if network == "corral" else [])


def test_a_process_trial_gets_the_loopback_endpoint_instead_of_the_agents_keys() -> None:
    host = {
        "PATH": "/usr/bin",
        "AWS_ACCESS_KEY_ID": "AKIAINSTANCE",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_SESSION_TOKEN": "t",
        "AWS_PROFILE": "ops",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/x",
        "AWS_DEFAULT_REGION": "us-east-1",
        "CORRAL_AGENT_DEV_TOKEN": "secret",
    }
    env = process_env(host, {"CORRAL_TRIAL_ID": "t-1"}, GRANT)
    assert env[URI_ENV] == LOOPBACK_URI and env[TOKEN_ENV] == GRANT.token
    _never_the_instance(env)
    assert "AWS_PROFILE" not in env and "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI" not in env
    assert env["AWS_DEFAULT_REGION"] == "us-east-1" and env["PATH"] == "/usr/bin"
    assert "CORRAL_AGENT_DEV_TOKEN" not in env
    # No grant (the local stack without a trial role): the environment is left as it was.
    assert process_env(host, {})["AWS_ACCESS_KEY_ID"] == "AKIAINSTANCE"
