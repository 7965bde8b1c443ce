"""The Docker executor, checked by what it hands the docker SDK (no engine here)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent_runtime.config import AgentConfig
from agent_runtime.executors import LaunchSpec
from agent_runtime.executors.docker import LABEL_TRIAL, DockerExecutor
from agent_runtime.trial_env import HELPER_DIR, HELPER_MOUNT
from corral.protocol.agent import BindMount, RegistryAuth
from tests.agent.conftest import dev_config


class FakeContainer:
    id = "c0ffee"

    def __init__(self) -> None:
        self.status = "running"
        self.attrs: dict[str, Any] = {"State": {"ExitCode": 0}}
        self.killed: list[str] = []
        self.removed = False

    def logs(self, **kw: Any) -> list[bytes]:
        return [b"hello ", b"world\npart", b"ial\n"] if kw["stdout"] else [b"oops"]

    def reload(self) -> None:
        pass

    def kill(self, signal: str) -> None:
        self.killed.append(signal)
        self.status, self.attrs = "exited", {"State": {"ExitCode": 143}}

    def remove(self, force: bool) -> None:
        self.removed = force


class FakeClient:
    def __init__(self) -> None:
        self.run_calls: list[dict[str, Any]] = []
        self.created_networks: list[str] = []
        self.container = FakeContainer()
        outer = self

        class Containers:
            def run(self, **kw: Any) -> FakeContainer:
                outer.run_calls.append(kw)
                return outer.container

        class Networks:
            def list(self, names: list[str]) -> list[str]:
                return []

            def create(self, name: str, driver: str) -> None:
                outer.created_networks.append(f"{name}/{driver}")

        self.containers, self.networks = Containers(), Networks()


def test_run_arguments(tmp_path: Path) -> None:
    config = dev_config(
        agent_docker_network="corral",
        agent_docker_runtime="nvidia",
        container_startup_script="export HOME=/root",
        http_proxy="http://proxy:3128",
    )
    client = FakeClient()
    executor = DockerExecutor(config, client, device_request=lambda ids: {"ids": ids})
    spec = LaunchSpec(
        trial_id="t-1",
        experiment_id="e-1",
        agent_id="rec-1",
        command=["python", "train.py"],
        env={"CORRAL_TRIAL_ID": "t-1", **config.proxy_env()},
        gpus=[2, 3],
        work_dir=tmp_path / "w",
        checkpoint_dir=tmp_path / "ckpt",
        metrics_dir=tmp_path / "w" / "metrics",
        image="pytorch/pytorch:2.3",
        bind_mounts=[
            BindMount(host_path="/data", container_path="/data", read_only=True),
            BindMount(host_path="/scratch", container_path="/s"),
        ],
        uid=1000,
        gid=1000,
    )
    lines: list[tuple[str, str]] = []
    handle = executor.launch(spec, lambda s, line: lines.append((s, line)))
    (kw,) = client.run_calls
    assert kw["image"] == "pytorch/pytorch:2.3" and kw["detach"] is True
    assert kw["device_requests"] == [{"ids": ["2", "3"]}]
    assert kw["network"] == "corral" and kw["runtime"] == "nvidia"
    assert kw["user"] == "1000:1000"
    assert kw["volumes"] == [
        f"{tmp_path}/ckpt:{tmp_path}/ckpt:rw",
        f"{HELPER_DIR}:/opt/corral/python:ro",  # corral_trial, on the trial's PYTHONPATH
        f"{tmp_path}/w/metrics:{tmp_path}/w/metrics:rw",  # CORRAL_METRICS_FILE is in there
        "/data:/data:ro",
        "/scratch:/s:rw",
    ]
    assert kw["labels"][LABEL_TRIAL] == "t-1"
    env = kw["environment"]
    assert env["HTTP_PROXY"] == env["http_proxy"] == "http://proxy:3128"
    # The script ran on the host before any pull (agent_runtime/startup.py), not in trials.
    assert "CORRAL_CONTAINER_STARTUP_SCRIPT" not in env
    assert kw["command"] == ["python", "train.py"]
    assert client.created_networks == ["corral/bridge"]
    assert handle.poll() is None
    handle.terminate()
    assert client.container.killed == ["SIGTERM"]
    assert handle.poll() == 143
    handle.cleanup()
    assert client.container.removed
    # The log threads reassemble chunks into lines.
    import time

    deadline = time.monotonic() + 2
    while len(lines) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(lines) == [("stderr", "oops"), ("stdout", "hello world"), ("stdout", "partial")]


def test_no_gpus_no_device_request_and_host_network_untouched(tmp_path: Path) -> None:
    config = dev_config(
        agent_docker_network="host",
        default_trial_image="busybox",
    )
    client = FakeClient()
    executor = DockerExecutor(config, client, device_request=lambda ids: ids)
    spec = LaunchSpec("t", "e", "a", ["true"], {}, [], tmp_path, tmp_path / "c")
    kw = executor.run_kwargs(spec)
    assert kw["device_requests"] == [] and kw["image"] == "busybox"
    assert "runtime" not in kw and "user" not in kw
    executor.launch(spec, lambda s, line: None)
    assert client.created_networks == []


def test_leftover_containers_of_a_previous_agent_are_stopped_and_removed(tmp_path: Path) -> None:
    class Leftover(FakeContainer):
        def __init__(self, trial_id: str, status: str) -> None:
            super().__init__()
            self.labels = {LABEL_TRIAL: trial_id}
            self.status = status
            self.stopped_with: int | None = None

        def stop(self, timeout: int) -> None:
            self.stopped_with = timeout

    running, exited = Leftover("t-run", "running"), Leftover("t-done", "exited")
    client = FakeClient()
    seen: list[dict[str, str]] = []

    class Containers:
        def list(self, all: bool, filters: dict[str, str]) -> list[Leftover]:
            seen.append(filters)
            return [running, exited]

    client.containers = Containers()  # type: ignore[assignment]
    config = dev_config(
        work_dir=tmp_path,
    )
    executor = DockerExecutor(config, client)
    assert executor.stop_leftovers(30.0) == ["t-run"]
    assert seen == [{"label": LABEL_TRIAL}]
    assert running.stopped_with == 30 and running.removed and exited.removed
    assert exited.stopped_with is None


def test_the_exit_is_reported_only_after_the_last_log_lines(tmp_path: Path) -> None:
    """The log stream ends with the container: lines still in it when the engine already
    says 'exited' must reach the sink before poll() reports the exit code."""
    import threading

    exited = threading.Event()

    class Slow(FakeContainer):
        def logs(self, **kw: Any) -> Any:
            if not kw["stdout"]:
                return iter(())

            def chunks() -> Any:
                yield b"first\n"
                exited.wait(timeout=5)
                yield b"last words\n"

            return chunks()

        def reload(self) -> None:
            self.status = "exited"
            exited.set()

    client = FakeClient()
    client.container = Slow()
    config = dev_config(
        default_trial_image="img",
        work_dir=tmp_path,
    )
    lines: list[str] = []
    spec = LaunchSpec(
        trial_id="t-1",
        experiment_id="e-1",
        agent_id="rec-1",
        command=["true"],
        env={},
        gpus=[],
        work_dir=tmp_path / "w",
        checkpoint_dir=tmp_path / "c",
    )
    handle = DockerExecutor(config, client).launch(spec, lambda _s, line: lines.append(line))
    assert handle.poll() == 0
    assert lines == ["first", "last words"]


def _gang_assignment(nnodes: int) -> Any:
    from corral.protocol.agent import TrialAssignment

    rendezvous = {
        "master_addr": "10.0.0.1",
        "master_port": 12355,
        "world_size": 2 * nnodes,
        "node_rank": 0,
        "nnodes": nnodes,
        "local_world_size": 2,
    }
    return TrialAssignment.model_validate(
        {
            "trial_id": "t-gang",
            "experiment_id": "e",
            "entrypoint": ["python", "train.py"],
            "image": "pytorch/pytorch:2.3",
            "gpus": [0, 1],
            "checkpoint": {"storage_uri": "s3://b/e/t"},
            "rendezvous": rendezvous if nnodes > 1 else None,
        }
    )


def _config(tmp_path: Path, network: str | None) -> AgentConfig:
    return dev_config(
        agent_docker_network=network,
        work_dir=tmp_path,
    )


@pytest.mark.parametrize("network", ["corral", "my-bridge", None])
def test_a_trial_spanning_agents_runs_on_the_host_network(
    tmp_path: Path, network: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """Peers on other instances connect to this instance's address (MASTER_ADDR is the rank-0
    instance's): only the host network receives them, whatever agent_docker_network says."""
    from agent_runtime.trials import launch_spec

    config = _config(tmp_path, network)
    client = FakeClient()
    executor = DockerExecutor(config, client, device_request=lambda ids: ids)
    spec = launch_spec(_gang_assignment(2), config, "rec-1", in_container=True)
    assert spec.nodes == 2
    with caplog.at_level(logging.INFO, logger="agent_runtime.executors.docker"):
        executor.launch(spec, lambda s, line: None)
    (kw,) = client.run_calls
    assert kw["network_mode"] == "host" and "network" not in kw
    assert client.created_networks == []  # the bridge is not needed for this trial
    assert "spans 2 agents: running it on the host network" in caplog.text


def test_a_trial_on_one_agent_keeps_the_configured_network(tmp_path: Path) -> None:
    from agent_runtime.trials import launch_spec

    config = _config(tmp_path, "corral")
    client = FakeClient()
    executor = DockerExecutor(config, client, device_request=lambda ids: ids)
    spec = launch_spec(_gang_assignment(1), config, "rec-1", in_container=True)
    assert spec.nodes == 1
    kw = executor.run_kwargs(spec)
    assert kw["network"] == "corral" and "network_mode" not in kw


@pytest.mark.parametrize(
    ("nodes", "network", "mode"),
    [(2, "corral", "host"), (1, "corral", "corral"), (1, "host", "host")],
)
def test_the_docker_sdk_accepts_the_arguments(
    tmp_path: Path, nodes: int, network: str, mode: str
) -> None:
    """Through the real SDK's containers.run (an API stub stands in for the engine): the
    arguments pass its checks ("network" and "network_mode" together are refused) and the
    engine is asked for the expected network mode."""
    from docker.models.containers import ContainerCollection  # type: ignore[import-untyped]

    from agent_runtime.executors.docker import _device_request

    created: list[dict[str, Any]] = []

    class Api:
        _version = "1.44"

        def create_container(self, **kw: Any) -> dict[str, str]:
            created.append(kw)
            return {"Id": "c0ffee"}

        def inspect_container(self, container_id: str) -> dict[str, str]:
            return {"Id": container_id}

        def start(self, container_id: str) -> None:
            pass

    class Client:
        api = Api()

    config = _config(tmp_path, network)
    # The real DeviceRequest type: the SDK builds the host config from it.
    executor = DockerExecutor(config, FakeClient(), device_request=_device_request)
    spec = LaunchSpec("t", "e", "a", ["true"], {}, [0], tmp_path, tmp_path / "c", image="busybox")
    kwargs = executor.run_kwargs(replace(spec, nodes=nodes))
    ContainerCollection(client=Client()).run(**kwargs)
    (create,) = created
    assert create["host_config"]["NetworkMode"] == mode


class FakeImage:
    def __init__(self, env: list[str]) -> None:
        self.attrs: dict[str, Any] = {"Config": {"Env": env}}


class ImageClient(FakeClient):
    """A client whose engine knows the images in ``local``; ``registry`` can be pulled."""

    def __init__(self, local: dict[str, list[str]], registry: dict[str, list[str]]) -> None:
        super().__init__()
        self.pulled: list[str] = []
        self.auths: list[dict[str, str] | None] = []
        outer = self

        class Images:
            def get(self, name: str) -> FakeImage:
                if name not in local:
                    raise LookupError(f"404 Client Error: No such image: {name}")
                return FakeImage(local[name])

            def pull(self, name: str, auth_config: dict[str, str] | None = None) -> FakeImage:
                if name not in registry:
                    raise PermissionError("pull access denied")
                outer.pulled.append(name)
                outer.auths.append(auth_config)
                return FakeImage(registry[name])

        self.images = Images()


def helper_spec(tmp_path: Path, image: str, env: dict[str, str]) -> LaunchSpec:
    return LaunchSpec(
        "t", "e", "a", ["python", "-c", "pass"], env, [], tmp_path, tmp_path / "c", image=image
    )


def test_the_image_pythonpath_is_kept_behind_the_helper(tmp_path: Path) -> None:
    # ENV PYTHONPATH=/workspace/src in the image: without it the trial cannot import its code.
    client = ImageClient({"team/train:1": ["PATH=/usr/bin", "PYTHONPATH=/workspace/src"]}, {})
    executor = DockerExecutor(dev_config(), client, device_request=lambda ids: ids)
    executor.launch(
        helper_spec(tmp_path, "team/train:1", {"PYTHONPATH": HELPER_MOUNT}), lambda s, line: None
    )
    (kw,) = client.run_calls
    assert kw["environment"]["PYTHONPATH"] == f"{HELPER_MOUNT}:/workspace/src"


def test_a_missing_image_is_pulled_to_read_its_pythonpath(tmp_path: Path) -> None:
    client = ImageClient({}, {"team/train:2": ["PYTHONPATH=/app"]})
    executor = DockerExecutor(dev_config(), client, device_request=lambda ids: ids)
    executor.launch(
        helper_spec(tmp_path, "team/train:2", {"PYTHONPATH": HELPER_MOUNT}), lambda s, line: None
    )
    assert client.pulled == ["team/train:2"]
    assert client.run_calls[0]["environment"]["PYTHONPATH"] == f"{HELPER_MOUNT}:/app"


def test_the_experiments_own_pythonpath_wins_over_the_images(tmp_path: Path) -> None:
    client = ImageClient({"team/train:1": ["PYTHONPATH=/workspace/src"]}, {})
    executor = DockerExecutor(dev_config(), client, device_request=lambda ids: ids)
    mine = {"PYTHONPATH": f"{HELPER_MOUNT}:/mine"}
    executor.launch(helper_spec(tmp_path, "team/train:1", mine), lambda s, line: None)
    assert client.run_calls[0]["environment"]["PYTHONPATH"] == f"{HELPER_MOUNT}:/mine"


def test_an_unreadable_image_leaves_the_error_to_containers_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = ImageClient({}, {})  # not local, and the pull is refused
    executor = DockerExecutor(dev_config(), client, device_request=lambda ids: ids)
    with caplog.at_level(logging.WARNING):
        executor.launch(
            helper_spec(tmp_path, "private/x:1", {"PYTHONPATH": HELPER_MOUNT}), lambda s, line: None
        )
    assert client.run_calls[0]["environment"]["PYTHONPATH"] == HELPER_MOUNT
    assert "cannot read the environment of image private/x:1" in caplog.text


def test_pulls_use_the_trials_credentials_else_the_pools(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pool_auth = {"username": "pool", "password": "pool-secret", "serveraddress": "r.example"}
    config = dev_config(registry_auth=pool_auth)
    client = ImageClient({}, {"r.example/a:1": [], "r.example/b:1": []})
    executor = DockerExecutor(config, client, device_request=lambda ids: ids)
    own = RegistryAuth(username="me", password="my-secret")  # type: ignore[arg-type]
    spec = replace(helper_spec(tmp_path, "r.example/a:1", {}), registry_auth=own)
    with caplog.at_level(logging.DEBUG):
        executor.launch(spec, lambda s, line: None)
        executor.launch(helper_spec(tmp_path, "r.example/b:1", {}), lambda s, line: None)
    assert client.pulled == ["r.example/a:1", "r.example/b:1"]
    assert client.auths == [{"username": "me", "password": "my-secret"}, pool_auth]
    assert "secret" not in caplog.text


def test_a_trial_without_image_gets_the_pools_default_by_its_gpus(tmp_path: Path) -> None:
    config = dev_config(default_trial_image={"cpu": "cpu:1", "gpu": "gpu:1"})
    executor = DockerExecutor(config, FakeClient(), device_request=lambda ids: ids)
    spec = replace(helper_spec(tmp_path, "", {}), image=None)
    assert executor.image_of(spec) == "cpu:1"
    assert executor.image_of(replace(spec, gpus=[0])) == "gpu:1"
    assert executor.image_of(replace(spec, image="own:2", gpus=[0])) == "own:2"
