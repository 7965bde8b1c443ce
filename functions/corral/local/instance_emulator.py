"""The machines behind moto's instances: each instance Corral launched boots from the user
data ``scale_up`` gave ``RunInstances``, on a disk of its own, and is powered off when the
instance goes.

moto boots instances at once, so a machine boots ``boot_delay_s`` after its instance is first
seen running, like a real boot. Booting (``corral.local.machine``): the emulator lays the
image on the instance's disk (``<state>/agents/<id>/root``; the agent install and an
``nvidia-smi`` reporting the instance type's GPUs), starts the instance's metadata service
(``corral.local.imds``: identity, role credentials, spot notices, tags), and runs the user
data read back from EC2 (``DescribeInstanceAttribute userData``) with
``CORRAL_BOOTSTRAP_ROOT`` set to the disk, ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` to the
metadata service and ``AWS_ENDPOINT_URL`` to the stack's moto server (the machine's network:
the agent's CloudWatch metrics go there). Every agent setting reaches the agent only through
that user data; the emulator writes no agent config. The agent signs its calls with the
role's credentials and the local API's IAM authorizer checks them
(``corral.local.iam_authorizer``).

A terminated instance is a machine that vanished: its processes are killed outright and its
disk deleted (``DeleteOnTermination``; its logs are kept in ``logs/<id>/``). Graceful stops
only happen through interruption notices (``faults.interrupt``, served as
``spot/instance-action`` by the metadata service), as on EC2. A stopped instance (the warm
pool) is a machine powered off: its processes are killed the same way, its disk stays, and
when the instance runs again it boots again from its user data ``boot_delay_s`` later. The
emulator also plays EC2's part in EventBridge: terminations it sees (and those it performs
when a notice window ends) are published as "EC2 Instance State-change Notification" events.
"""

from __future__ import annotations

import base64
import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.domain.catalog import gpus_for
from corral.local import faults
from corral.local.credentials import CredentialStore
from corral.local.imds import InstanceFacts, MetadataService
from corral.local.loops import run_until_stopped
from corral.local.machine import AGENT_LOG, Boot, boot_env, delete_disk, install_image, start_boot
from corral.local.state import StateDir

log = logging.getLogger(__name__)

_LIVE = ("pending", "running")
_POWERED_OFF = ("stopping", "stopped")


@dataclass(frozen=True)
class EmulatorSettings:
    ownership: tuple[tuple[str, str], ...]  # (tag key, tag value) of every pool
    agent_home: Path  # the agent install the image puts at /opt/corral-agent
    credentials: CredentialStore  # the role credentials the metadata services hand out
    boot_delay_s: float = 2.0
    poll_s: float = 1.0
    # The machines' environment: the developer's, never the stack's secrets or AWS settings
    # (trials inherit it from the process executor).
    agent_env: dict[str, str] | None = None
    # Where the machines reach AWS (the stack's moto server): their AWS_ENDPOINT_URL.
    aws_endpoint: str | None = None


def forget_previous_machines(state: StateDir) -> list[str]:
    """A new stack's moto has none of the previous run's instances: their disks go as a
    terminated instance's do (logs kept in ``logs/<id>/``). Returns their ids."""
    gone = []
    for directory in sorted((state.root / "agents").glob("i-*")):
        delete_disk(directory / "root", state.logs / directory.name)
        shutil.rmtree(directory, ignore_errors=True)
        gone.append(directory.name)
    return gone


class InstanceEmulator:
    def __init__(
        self, state: StateDir, session: Any, settings: EmulatorSettings, stop: threading.Event
    ) -> None:
        self._state = state
        self._session = session
        self._ec2 = session.client("ec2")
        self._iam = session.client("iam")
        self._region = session.region_name or "us-east-1"
        self._settings = settings
        self._stop = stop
        self._first_running: dict[str, float] = {}
        self._known_state: dict[str, str] = {}
        self._metadata: dict[str, MetadataService] = {}
        self.agents: dict[str, Boot] = {}  # instance id -> its running machine
        self.exited: dict[str, int] = {}  # instance id -> exit code of an agent that quit
        self.launched: set[str] = set()
        self.terminated: set[str] = set()
        self.thread = threading.Thread(target=self._run, name="instance-emulator", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        poll_s = self._settings.poll_s
        run_until_stopped(
            self._stop, self.tick, log, "instance emulator tick", every_s=poll_s, retry_s=poll_s
        )

    def disk(self, instance_id: str) -> Path:
        return self._state.agent_dir(instance_id) / "root"

    # ---- one pass ---------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        instances = self._describe()
        due = faults.due_terminations(self._state)
        terminated = [self._terminate(i, instances.get(i)) for i in due]  # all, not any()
        if True in terminated:
            instances = self._describe()
        for instance_id, instance in instances.items():
            name = instance["State"]["Name"]
            self._observe(instance_id, name)
            if name in _POWERED_OFF:
                self._power_off(instance_id, name)
        for instance_id, instance in instances.items():
            if instance["State"]["Name"] != "running" or instance_id in self.agents:
                continue
            if instance_id in self.exited:
                continue  # the agent quit on its own (refused, unhealthy): as systemd does
            first = self._first_running.setdefault(instance_id, now)
            if now - first >= self._settings.boot_delay_s:
                self._boot(instance)
        for instance_id in list(self.agents):
            name = instances.get(instance_id, {}).get("State", {}).get("Name", "terminated")
            if name not in _LIVE:
                self._kill(instance_id, f"instance {name}")
        for instance_id, instance in instances.items():
            if instance["State"]["Name"] in ("shutting-down", "terminated"):
                self._discard(instance_id)
        self._reap_exited()

    def _terminate(self, instance_id: str, instance: dict[str, Any] | None) -> bool:
        """The end of a notice window: EC2 takes the instance, unless Corral already has."""
        if instance is None or instance["State"]["Name"] not in _LIVE:
            return False
        log.info("notice window over: terminating %s", instance_id)
        try:
            self._ec2.terminate_instances(InstanceIds=[instance_id])
        except Exception as exc:  # raced with Corral's own termination
            log.info("terminating %s: %s", instance_id, exc)
        return True

    def _describe(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for key, value in self._settings.ownership:
            pages = self._ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": f"tag:{key}", "Values": [value]}]
            )
            for page in pages:
                for reservation in page["Reservations"]:
                    for instance in reservation["Instances"]:
                        found[instance["InstanceId"]] = instance
        return found

    def _observe(self, instance_id: str, name: str) -> None:
        before = self._known_state.get(instance_id)
        self._known_state[instance_id] = name
        if name in _LIVE:
            self.launched.add(instance_id)
        if before == name or name not in ("shutting-down", "terminated", "stopped", "running"):
            return
        if name == "terminated":
            self.terminated.add(instance_id)
        try:
            faults.put_ec2_event(
                self._session,
                faults.STATE_CHANGE,
                instance_id,
                {"instance-id": instance_id, "state": name},
            )
        except Exception as exc:  # the event is a hint; reconcile covers a lost one
            log.warning("could not publish the state change of %s: %s", instance_id, exc)

    def _power_off(self, instance_id: str, name: str) -> None:
        """A stopped machine: its processes die, its disk stays, and the next start is a
        fresh boot (the boot delay again; an agent that had quit on its own boots again)."""
        self._kill(instance_id, f"instance {name}")
        self._first_running.pop(instance_id, None)
        self.exited.pop(instance_id, None)

    def _discard(self, instance_id: str) -> None:
        """A terminated machine: its metadata service, credentials and disk go."""
        service = self._metadata.pop(instance_id, None)
        if service is not None:
            service.stop()
        self._settings.credentials.revoke_instance(instance_id)
        root = self.disk(instance_id)
        if root.exists():
            delete_disk(root, self._state.logs / instance_id)
            log.info("instance %s terminated: its disk is deleted", instance_id)
        # The rest is the emulator's own (notice and rebalance files): gone with it.
        shutil.rmtree(self._state.agent_dir(instance_id), ignore_errors=True)

    # ---- machines ---------------------------------------------------------------------
    def _boot(self, instance: dict[str, Any]) -> None:
        instance_id = instance["InstanceId"]
        root = self.disk(instance_id)
        root.mkdir(parents=True, exist_ok=True)
        gpus = gpus_for("aws", instance["InstanceType"]) or 0
        install_image(root, self._settings.agent_home, gpus)
        service = self._metadata.get(instance_id)
        if service is None:
            service = MetadataService(self._facts(instance), self._settings.credentials)
            service.start()
            self._metadata[instance_id] = service
        env = boot_env(
            dict(self._settings.agent_env or {}), root, service.url, self._settings.aws_endpoint
        )
        console = self._state.logs / f"agent-{instance_id}.log"
        boot = start_boot(instance_id, root, self._user_data(instance_id), env, console)
        self._state.add_child(boot.proc.pid)
        self.agents[instance_id] = boot
        log.info(
            "instance %s booted from its user data (%d GPUs, metadata %s): boot log %s, "
            "agent log %s",
            instance_id,
            gpus,
            service.url,
            console,
            root / AGENT_LOG,
        )

    def _user_data(self, instance_id: str) -> bytes:
        reply = self._ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        value = (reply.get("UserData") or {}).get("Value") or ""
        return base64.b64decode(value) if value else b""

    def _facts(self, instance: dict[str, Any]) -> InstanceFacts:
        instance_id = instance["InstanceId"]
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
        options = instance.get("MetadataOptions") or {}
        launched = instance.get("LaunchTime")
        return InstanceFacts(
            instance_id=instance_id,
            instance_type=instance["InstanceType"],
            zone=(instance.get("Placement") or {}).get("AvailabilityZone", f"{self._region}a"),
            region=self._region,
            account=self._settings.credentials.account,
            image_id=instance.get("ImageId", ""),
            spot=instance.get("InstanceLifecycle") == "spot",
            private_ip="127.0.0.1",  # every machine is this computer: gangs meet on loopback
            launched_at=launched.strftime("%Y-%m-%dT%H:%M:%SZ") if launched else "",
            role=self._role_of(instance),
            tags=tags if options.get("InstanceMetadataTags") == "enabled" else None,
            notice_file=self._state.notice_file(instance_id),
            rebalance_file=self._state.rebalance_file(instance_id),
        )

    def _role_of(self, instance: dict[str, Any]) -> str | None:
        """The role of the instance's profile: none, no credentials (as on EC2)."""
        arn = (instance.get("IamInstanceProfile") or {}).get("Arn")
        if not arn:
            return None
        try:
            profile = self._iam.get_instance_profile(InstanceProfileName=arn.rsplit("/", 1)[1])
        except Exception as exc:
            log.warning("%s: unknown profile %s: %s", instance["InstanceId"], arn, exc)
            return None
        roles = profile["InstanceProfile"].get("Roles") or []
        return str(roles[0]["RoleName"]) if roles else None

    def _kill(self, instance_id: str, why: str) -> None:
        boot = self.agents.pop(instance_id, None)
        if boot is None:
            return
        log.info("%s: powering off (boot pid %d, its agent and trials)", why, boot.proc.pid)
        boot.kill()
        self._state.remove_child(boot.proc.pid)

    def _reap_exited(self) -> None:
        for instance_id, boot in list(self.agents.items()):
            if boot.running():
                continue
            code = boot.exit_code
            if code is None:  # the boot itself failed, or the agent's code went elsewhere
                code = -1 if boot.agent_pid() is not None else (boot.proc.returncode or 0)
            log.warning(
                "nothing runs on %s any more (exit code %d); see %s",
                instance_id,
                code,
                self._state.logs / f"agent-{instance_id}.log",
            )
            boot.kill()  # trials it left behind
            self.exited[instance_id] = code
            del self.agents[instance_id]
            self._state.remove_child(boot.proc.pid)

    def stop_all(self, grace_s: float = 3.0) -> None:
        """Stack shutdown: give agents a moment to report (SIGTERM), then kill every tree."""
        for boot in list(self.agents.values()):
            boot.kill(grace_s=grace_s)
            self._state.remove_child(boot.proc.pid)
        self.agents.clear()
        for service in self._metadata.values():
            service.stop()
        self._metadata.clear()
