"""Run a trial in a Docker container on exactly the GPUs it was assigned.

The ``docker`` SDK is imported lazily (only here, only when Docker is used) and the client is
injected, so tests check the arguments given to a fake client without an engine. Containers
belong to the Docker daemon, not to the agent: they keep running if the agent restarts or the
control plane is briefly unreachable.

Networking: a trial on one agent runs on ``agent_docker_network`` (default ``corral``, a
bridge the executor creates). A trial spanning several agents always runs on the host
network, whatever ``agent_docker_network`` says: its peers connect to this instance's own
address (``MASTER_ADDR`` is the rank-0 instance's address) on the rendezvous port 12355 and
the GLOO/NCCL port ranges, and only the host's network stack receives those. A bridge would
need every port of the ranges published, and a macvlan/ipvlan/overlay container has an address
of its own that the control plane does not know. Determined instead requires
``agent_docker_network: host`` for every task; Corral keeps single-agent trials isolated.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from agent_runtime import metadata_guard
from agent_runtime.config import AgentConfig
from agent_runtime.executors import LaunchSpec, LineSink
from agent_runtime.trial_env import HELPER_DIR, HELPER_MOUNT

log = logging.getLogger(__name__)

_BUILTIN_NETWORKS = {"host", "bridge", "none", "default"}
LABEL_TRIAL = "ai.corral.trial-id"
LABEL_EXPERIMENT = "ai.corral.experiment-id"
LABEL_AGENT = "ai.corral.agent-id"


def docker_client() -> Any:
    """A client for the local engine; raises if the SDK or the engine is missing."""
    import docker  # type: ignore[import-untyped,unused-ignore]

    client = docker.from_env()
    client.ping()
    return client


def _device_request(device_ids: list[str]) -> object:
    from docker.types import DeviceRequest  # type: ignore[import-untyped,unused-ignore]

    return DeviceRequest(device_ids=device_ids, capabilities=[["gpu"]])


class DockerHandle:
    def __init__(self, container: Any, readers: list[threading.Thread] | None = None) -> None:
        self._container = container
        self._readers = readers or []

    def poll(self) -> int | None:
        try:
            self._container.reload()
        except Exception as exc:
            if type(exc).__name__ == "NotFound":  # removed behind our back
                return 137
            log.warning("cannot inspect container %s: %s", self._container.id, exc)
            return None  # the engine hiccuped; the container is probably still fine
        if self._container.status not in ("exited", "dead"):
            return None
        # The log streams end with the container: let them deliver the last lines (often
        # the error) before the exit is reported, as the process executor does.
        for reader in self._readers:
            reader.join(timeout=2.0)
        return int(self._container.attrs.get("State", {}).get("ExitCode", 255))

    def terminate(self) -> None:
        self._kill("SIGTERM")

    def kill(self) -> None:
        self._kill("SIGKILL")

    def _kill(self, sig: str) -> None:
        try:
            self._container.kill(signal=sig)
        except Exception as exc:  # already stopped: the engine answers 409
            log.debug("kill %s %s: %s", sig, self._container.id, exc)

    def cleanup(self) -> None:
        try:
            self._container.remove(force=True)
        except Exception as exc:
            log.warning("cannot remove container %s: %s", self._container.id, exc)


class DockerExecutor:
    name = "docker"
    in_container = True

    def __init__(
        self,
        config: AgentConfig,
        client: Any,
        device_request: Callable[[list[str]], object] = _device_request,
    ) -> None:
        self._config = config
        self._client = client
        self._device_request = device_request
        self._network_ready = False

    def _ensure_network(self, spec: LaunchSpec) -> None:
        if spec.nodes == 1:
            self._create_network()

    def _create_network(self) -> None:
        # Like Determined's agent: create the task network on first use if it is missing.
        name = self._config.agent_docker_network
        if self._network_ready or not name or name in _BUILTIN_NETWORKS:
            return
        if not self._client.networks.list(names=[name]):
            log.info("creating docker network %s", name)
            self._client.networks.create(name, driver="bridge")
        self._network_ready = True

    def bridge_gateway(self) -> str | None:
        """The IPv4 gateway of the network single-agent trials use (creating it if needed):
        the host's address on that bridge, where the trial-credentials listener for bridge
        trials binds. None when those trials use the host network or no network."""
        name = self._config.agent_docker_network or "bridge"  # None: Docker's default bridge
        if name in ("host", "none"):
            return None
        self._create_network()
        attrs = self._client.networks.get(name).attrs or {}
        for pool in (attrs.get("IPAM") or {}).get("Config") or []:
            gateway = str(pool.get("Gateway") or "")
            if gateway and ":" not in gateway:
                return gateway
        return None

    def image_of(self, spec: LaunchSpec) -> str:
        """The trial's image; a trial stored before submissions named one gets the pool's
        ``default_trial_image`` (a ``{cpu, gpu}`` map picked by whether it has GPUs)."""
        default = self._config.default_trial_image
        if not isinstance(default, str) and default is not None:
            default = default.pick(bool(spec.gpus))
        image = spec.image or default
        if not image:
            raise ValueError("the trial has no image and default_trial_image is not set")
        return image

    def _auth(self, spec: LaunchSpec) -> dict[str, str] | None:
        """Registry credentials of the pull: the trial's own, else the pool's."""
        if spec.registry_auth is not None:
            return spec.registry_auth.docker_auth()
        if self._config.registry_auth is not None:
            return self._config.registry_auth.docker_auth()
        return None

    def ensure_image(self, image: str, auth: dict[str, str] | None = None) -> Any | None:
        """The image, pulled first when the engine lacks it (with ``auth`` when given: the
        pull ``containers.run`` would do takes none), or None when it cannot be had; then
        ``containers.run`` reports the real error. The credentials are never logged."""
        try:
            return self._client.images.get(image)
        except Exception:  # docker.errors.ImageNotFound: pull it
            pass
        try:
            if auth:
                return self._client.images.pull(image, auth_config=auth)
            return self._client.images.pull(image)
        except Exception as exc:
            log.warning("cannot pull image %s: %s", image, exc)
            return None

    def image_pythonpath(self, image: str, found: Any | None) -> str | None:
        """The ``ENV PYTHONPATH`` of ``found`` (``ensure_image(image)``), or None: none set, or
        the image could not be had (no registry access, say)."""
        try:
            variables = (found.attrs.get("Config") or {}).get("Env") or []
        except Exception:
            log.warning("cannot read the environment of image %s", image)
            return None
        for variable in variables:
            name, _, value = str(variable).partition("=")
            if name == "PYTHONPATH" and value:
                return value
        return None

    def run_kwargs(self, spec: LaunchSpec, image_pythonpath: str | None = None) -> dict[str, Any]:
        """Everything handed to ``containers.run``: one place to read and to test.
        ``image_pythonpath``: the image's ``ENV PYTHONPATH`` (``image_pythonpath()``)."""
        c = self._config
        image = self.image_of(spec)
        env = dict(spec.env)
        if image_pythonpath and not _own_pythonpath(spec):
            # The trial set no PYTHONPATH of its own, so the image's applies (ENV
            # PYTHONPATH=/workspace is common): Docker replaces an image's variable by one
            # given at run instead of merging them, so the helper goes in front of it here.
            env["PYTHONPATH"] = f"{HELPER_MOUNT}:{image_pythonpath}"
        # The checkpoints, the corral_trial helper (on PYTHONPATH) and the metrics file.
        volumes = [
            f"{spec.checkpoint_dir}:{spec.checkpoint_dir}:rw",
            f"{HELPER_DIR}:{HELPER_MOUNT}:ro",
        ]
        if spec.metrics_dir is not None:
            volumes.append(f"{spec.metrics_dir}:{spec.metrics_dir}:rw")
        volumes += [
            f"{m.host_path}:{m.container_path}:{'ro' if m.read_only else 'rw'}"
            for m in spec.bind_mounts
        ]
        kwargs: dict[str, Any] = {
            "image": image,
            "command": spec.command,
            "detach": True,
            "name": f"corral-{spec.trial_id}-{uuid.uuid4().hex[:6]}",
            "environment": env,
            "volumes": volumes,
            "labels": {
                LABEL_TRIAL: spec.trial_id,
                LABEL_EXPERIMENT: spec.experiment_id,
                LABEL_AGENT: spec.agent_id,
            },
            # PyTorch data loaders share tensors through /dev/shm; Docker's 64 MB kills them.
            "shm_size": "4g",
            "device_requests": (
                [self._device_request([str(i) for i in spec.gpus])] if spec.gpus else []
            ),
        }
        host_network = spec.nodes > 1 or c.agent_docker_network == "host"
        if host_network:
            # network_mode, not network: the SDK refuses both, and "host" is a mode.
            kwargs["network_mode"] = "host"
        elif c.agent_docker_network:
            kwargs["network"] = c.agent_docker_network
        if spec.credentials is not None:
            # The trial's own credentials, at the address its network reaches (loopback on the
            # host network, the bridge's on a bridge), under what the experiment set itself.
            env = {**spec.credentials.env("loopback" if host_network else "bridge"), **env}
            kwargs["environment"] = env
        if c.trial_cgroup_parent and metadata_guard.active(c):
            # Outside system.slice: the metadata guard's OUTPUT rule keys on it, which is what
            # keeps a host-network trial from the instance's metadata service.
            kwargs["cgroup_parent"] = c.trial_cgroup_parent
        if c.agent_docker_runtime:
            kwargs["runtime"] = c.agent_docker_runtime
        if spec.uid is not None or spec.gid is not None:
            uid = spec.uid if spec.uid is not None else 0
            kwargs["user"] = f"{uid}:{spec.gid}" if spec.gid is not None else str(uid)
        return kwargs

    def stop_leftovers(self, grace_s: float) -> list[str]:
        """Containers with Corral's trial label (this host runs only Corral's trials): Docker
        kept them across the agent's restart; stop them (SIGTERM, SIGKILL after grace)."""
        stopped: list[str] = []
        for container in self._client.containers.list(all=True, filters={"label": LABEL_TRIAL}):
            trial_id = (container.labels or {}).get(LABEL_TRIAL)
            was_running = container.status == "running"
            try:
                if was_running:
                    container.stop(timeout=max(1, int(grace_s)))
                container.remove(force=True)
            except Exception as exc:  # already gone, or the engine refused: say so, go on
                log.warning("cannot clean up container %s: %s", container.id, exc)
            if trial_id and was_running:
                stopped.append(trial_id)
        return stopped

    def launch(self, spec: LaunchSpec, on_line: LineSink) -> DockerHandle:
        spec.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self._ensure_network(spec)
        if spec.nodes > 1 and self._config.agent_docker_network != "host":
            log.info(
                "trial %s spans %d agents: running it on the host network, not %r, so its "
                "NCCL/GLOO peers on other instances can reach it",
                spec.trial_id,
                spec.nodes,
                self._config.agent_docker_network,
            )
        # The image is pulled here if missing, with the registry credentials (the agent calls
        # launch off its loop); its PYTHONPATH is read from it.
        image = self.image_of(spec)
        found = self.ensure_image(image, self._auth(spec))
        own = _own_pythonpath(spec)
        image_path = None if own else self.image_pythonpath(image, found)
        kwargs = self.run_kwargs(spec, image_path)
        container = self._client.containers.run(**kwargs)
        readers = []
        for stream in ("stdout", "stderr"):
            chunks = container.logs(
                stream=True, follow=True, stdout=stream == "stdout", stderr=stream == "stderr"
            )
            reader = threading.Thread(
                target=_pump,
                args=(chunks, stream, on_line),
                name=f"log-{spec.trial_id}-{stream}",
                daemon=True,
            )
            reader.start()
            readers.append(reader)
        return DockerHandle(container, readers)


def _own_pythonpath(spec: LaunchSpec) -> bool:
    """Whether the experiment set a PYTHONPATH of its own (the agent's is the helper alone;
    ``trial_env``), which then wins over the image's."""
    return spec.env.get("PYTHONPATH") != HELPER_MOUNT


def _pump(chunks: Iterable[bytes], stream: str, on_line: LineSink) -> None:
    """The SDK yields arbitrary chunks, not lines: reassemble lines before shipping them."""
    pending = b""
    try:
        for chunk in chunks:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                on_line(stream, line.decode("utf-8", errors="replace").rstrip("\r"))
    except Exception as exc:  # the engine closed the stream (container removed)
        log.debug("log stream %s ended: %s", stream, exc)
    if pending:
        on_line(stream, pending.decode("utf-8", errors="replace").rstrip("\r"))
