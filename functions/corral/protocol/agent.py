"""The agent protocol: what an agent sends the control plane and what it gets back.

This module is the contract between ``agent_runtime`` and the control plane (the services
that apply an agent's calls and the API routes that carry them); all of them import it, and
it imports nothing but pydantic, so the agent never depends on control-plane internals.
Every field has a default or a clear type so either side can be upgraded first.

Flow: the agent proves its identity and registers its GPUs (``RegisterRequest``), then
heartbeats every few seconds (``HeartbeatRequest``); each reply (``HeartbeatResponse``)
carries the trials to start (with everything needed to run them), the trials to stop, and
whether to drain. State changes of a trial and its log lines are sent as they happen.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_serializer

PROTOCOL_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class IdentityKind(StrEnum):
    EC2 = "ec2"  # IMDSv2 instance identity document + its PKCS7 signature
    GCE = "gce"  # a metadata-server identity token (JWT) with our audience
    DEV = "dev"  # the local stack: a token handed out by the instance emulator


class Identity(_Model):
    kind: IdentityKind
    document: str = Field(description="Identity document (EC2), identity JWT (GCE) or dev token")
    signature: str | None = Field(default=None, description="PKCS7 signature (EC2 only)")


class GpuInfo(_Model):
    index: int = Field(ge=0)
    uuid: str
    name: str
    memory_mib: int = Field(ge=0)


class RegisterRequest(_Model):
    protocol: int = PROTOCOL_VERSION
    cloud_id: str = Field(min_length=1, description="EC2 instance id or GCE instance name")
    record_id: str | None = Field(default=None, description="Corral record id from the tags")
    identity: Identity
    instance_type: str
    zone: str
    capacity_type: str = "on-demand"
    private_ip: str | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)
    agent_version: str = "0"
    unhealthy_reason: str | None = Field(
        default=None,
        description="Set when the machine is not what it should be (GPUs missing): the "
        "control plane then terminates the instance at once instead of registering it",
    )


class RegisterResponse(_Model):
    agent_id: str
    heartbeat_interval_s: float = 5.0
    log_batch_max_lines: int = 500
    dead_man_switch_s: float = 600.0
    fence_after_s: float | None = Field(
        default=None,
        description="Out of contact this long, the agent stops (checkpoints) its trials: the "
        "control plane declares a silent agent lost, and runs its trials elsewhere, soon "
        "after, and a trial must never run in two places. None: never",
    )
    trial_role_arn: str | None = Field(
        default=None,
        description="The deployment's trial role (AWS): the agent assumes it once per trial "
        "and serves that session to the trial alone. None: the deployment names none",
    )


class GpuMetric(_Model):
    index: int
    utilization_pct: float = Field(ge=0, le=100)
    memory_used_mib: float = Field(ge=0)


class AgentTrialState(StrEnum):
    """A trial as the agent sees it. The control plane maps these onto its state machine."""

    STARTING = "starting"  # pulling the image, creating the container
    RUNNING = "running"
    EXITED = "exited"  # the process ended by itself: see exit_code
    PREEMPTED = "preempted"  # stopped for an interruption notice after checkpointing
    STOPPED = "stopped"  # stopped because the control plane asked


class TrialStatus(_Model):
    trial_id: str
    state: AgentTrialState
    exit_code: int | None = None
    latest_checkpoint: str | None = None
    message: str | None = None
    log_end_seq: int | None = Field(
        default=None,
        ge=-1,
        description="With a terminal state: the seq of the last log line of the trial on this "
        "agent (-1: none), sent before this status; readers follow the logs up to it",
    )


# At most this many metric points in one heartbeat (the agent sends up to 500; the rest wait
# for the next heartbeat in the trial's metrics file).
MAX_METRIC_POINTS = 1_000


class MetricPointIn(_Model):
    """One point a trial reported (docs/metrics.md). ``seq`` is the agent's number for it,
    unique and increasing per trial across runs and agents, so a resent point is dropped."""

    seq: int = Field(ge=0)
    kind: str = Field(description="training or validation (other kinds are dropped)")
    batches: int = Field(ge=0, description="batches trained when the values were taken")
    values: dict[str, float] = Field(description="finite numbers by name")
    at: float = Field(description="when the agent read it (epoch seconds)")


class TrialMetrics(_Model):
    trial_id: str
    points: list[MetricPointIn] = Field(max_length=MAX_METRIC_POINTS)


class HeartbeatRequest(_Model):
    trials: list[TrialStatus] = Field(default_factory=list)
    gpu_metrics: list[GpuMetric] = Field(default_factory=list)
    metrics: list[TrialMetrics] = Field(
        default_factory=list,
        description="New metric points of trials that ran here, oldest first; agents of "
        "protocol 1 before metrics send none",
    )
    draining: bool = Field(
        default=False,
        description="The agent takes no new work of its own accord (SIGTERM, a rebalance "
        "recommendation); not an echo of the control plane's drain order",
    )
    interruption_notice: bool = Field(
        default=False, description="The agent saw a spot/preemption notice in the metadata"
    )


class BindMount(_Model):
    host_path: str
    container_path: str
    read_only: bool = False


class Rendezvous(_Model):
    """torch.distributed settings for a trial spread over several agents."""

    master_addr: str
    master_port: int = 29500
    world_size: int  # GPUs in all (one process per GPU)
    node_rank: int
    nnodes: int
    local_world_size: int


class CheckpointSpec(_Model):
    storage_uri: str = Field(description="s3://bucket/prefix/..., gs://..., or file:///dir")
    latest: str | None = Field(default=None, description="Checkpoint to resume from, if any")
    endpoint_url: str | None = Field(
        default=None,
        description="s3:// storage only: an S3-compatible endpoint (MinIO, ...); None: AWS S3",
    )


class RegistryAuth(_Model):
    """Credentials for pulling a trial's image (Docker's ``AuthConfig``). The password is
    masked in ``repr`` and logs, and written in the clear only in JSON (the wire to the agent,
    the agent config file)."""

    username: str | None = None
    password: SecretStr | None = None
    serveraddress: str | None = None
    email: str | None = None

    @field_serializer("password", when_used="json")
    def _clear(self, value: SecretStr | None) -> str | None:
        return value.get_secret_value() if value is not None else None

    def docker_auth(self) -> dict[str, str]:
        """The Docker SDK's ``auth_config``."""
        out = {
            "username": self.username,
            "password": self.password.get_secret_value() if self.password else None,
            "serveraddress": self.serveraddress,
            "email": self.email,
        }
        return {k: v for k, v in out.items() if v is not None}


class TrialAssignment(_Model):
    trial_id: str
    experiment_id: str
    image: str | None = None
    entrypoint: list[str]
    gpus: list[int] = Field(description="Device indices on this agent")
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, str] = Field(default_factory=dict)
    bind_mounts: list[BindMount] = Field(default_factory=list)
    checkpoint: CheckpointSpec
    rendezvous: Rendezvous | None = None
    run_as_uid: int | None = None
    run_as_gid: int | None = None
    # The experiment's environment.registry_auth; None: the agent's (the pool's), if any.
    registry_auth: RegistryAuth | None = None


class HeartbeatResponse(_Model):
    start: list[TrialAssignment] = Field(default_factory=list)
    stop: list[str] = Field(default_factory=list, description="Trial ids to stop now")
    drain: bool = False
    metrics_retry: list[str] = Field(
        default_factory=list,
        description="Trials whose metric points were not stored this time (a lost race): "
        "send them again. Every other point sent was stored or is a known duplicate",
    )


class LogLineIn(_Model):
    seq: int = Field(ge=0)
    at: float
    line: str = Field(max_length=16_384)
    stream: str = "stdout"


class LogBatch(_Model):
    lines: list[LogLineIn] = Field(max_length=5_000)
