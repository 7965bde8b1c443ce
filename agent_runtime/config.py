"""Agent configuration: a YAML/JSON file (written by the bootstrap script to
``/etc/corral/agent.yaml``) overridden field by field by ``CORRAL_AGENT_<FIELD>`` variables.

Plain pydantic rather than pydantic-settings: the agent's dependencies are the ``agent``
extra only, and the override rule is small enough to own.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from corral.protocol.agent import RegistryAuth
from corral.protocol.port_ranges import parse_port_range

log = logging.getLogger(__name__)

ENV_PREFIX = "CORRAL_AGENT_"
CONFIG_ENV = "CORRAL_AGENT_CONFIG"
DEFAULT_PATH = Path("/etc/corral/agent.yaml")
# Where the EC2 metadata service answers when the config names none: the variable botocore
# reads too, so the agent's identity and its signing credentials come from the same place.
# Unset on EC2 (the link-local default); the local stack's emulator sets it per instance.
EC2_METADATA_ENV = "AWS_EC2_METADATA_SERVICE_ENDPOINT"

AuthMode = Literal["dev", "gce", "aws"]
CloudKind = Literal["ec2", "gce", "dev"]
ROLE_ARN = re.compile(r"^arn:[a-z-]+:iam::\d{12}:role/[\w+=,.@/-]+$")


class ImageMap(BaseModel):
    """Images by trial kind (Determined's ``{cpu: ..., gpu: ...}``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cpu: str | None = None
    gpu: str | None = None

    def pick(self, gpus: bool) -> str | None:
        return (self.gpu or self.cpu) if gpus else (self.cpu or self.gpu)


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    # --- control plane -------------------------------------------------------------------
    api_url: str = Field(min_length=1, description="Base URL of the control plane API")
    auth: AuthMode = "dev"
    dev_token: SecretStr | None = None
    cloud: CloudKind | None = Field(
        default=None, description="Where identity comes from; default: ec2 for aws, gce, dev"
    )
    pool: str = "default"
    record_id: str | None = None
    aws_region: str | None = Field(default=None, description="SigV4 region; default: IMDS")
    request_timeout_s: float = Field(default=10.0, gt=0)
    heartbeat_interval_s: float = Field(default=5.0, gt=0, description="Until register says")
    agent_reconnect_attempts: int = Field(default=5, ge=0)
    agent_reconnect_backoff: float = Field(default=5.0, ge=0)
    max_backoff_s: float = Field(default=60.0, gt=0)
    dead_man_switch_s: float | None = Field(
        default=None, description="None: the control plane's value; 0: disabled"
    )
    shutdown_command: list[str] = Field(default_factory=lambda: ["shutdown", "-h", "now"])
    # --- identity (dev / local stack) ----------------------------------------------------
    dev_instance_id: str | None = None
    dev_instance_type: str = "local"
    dev_zone: str = "local"
    dev_capacity_type: str = "on-demand"
    dev_notice_file: Path | None = Field(
        default=None, description="Local stack: an interruption notice is this file existing"
    )
    ec2_metadata_url: str = "http://169.254.169.254"
    gce_metadata_url: str = "http://metadata.google.internal"
    metadata_timeout_s: float = Field(default=2.0, gt=0)
    # --- GPUs ----------------------------------------------------------------------------
    gpu_detection: Literal["auto", "nvml", "nvidia-smi"] = "auto"
    nvidia_smi: str = "nvidia-smi"
    fake_gpus: int | None = Field(default=None, ge=0, description="Local stack: pretend GPUs")
    expected_gpus: int | None = Field(default=None, ge=0, description="What the type promises")
    # --- trials --------------------------------------------------------------------------
    work_dir: Path = Path("/var/lib/corral")
    run_dir: Path = Field(
        default=Path("/run/corral"), description="Emptied at boot: what ran once this boot"
    )
    executor: Literal["docker", "process", "auto"] = "auto"
    agent_docker_network: str | None = "corral"
    agent_docker_runtime: str | None = None
    default_trial_image: str | ImageMap | None = Field(
        default=None, description="A name, or {cpu, gpu}: picked by whether the trial has GPUs"
    )
    registry_auth: RegistryAuth | None = Field(
        default=None, description="Pulls of trials whose assignment carries no credentials"
    )
    container_startup_script: str | None = Field(
        default=None, description="Run on the host once, before the first image pull"
    )
    http_proxy: str | None = None
    https_proxy: str | None = None
    no_proxy: str | None = None
    run_as_uid: int | None = Field(default=None, ge=0)
    run_as_gid: int | None = Field(default=None, ge=0)
    stop_grace_s: float = Field(default=30.0, ge=0, description="SIGTERM-to-SIGKILL on stop")
    # The cluster's task_container_defaults (LOW:HIGH): GLOO_PORT_RANGE / NCCL_PORT_RANGE.
    gloo_port_range: str | None = Field(default=None, description="None: any port")
    nccl_port_range: str | None = Field(default=None, description="None: any port")
    # --- interruptions -------------------------------------------------------------------
    interruption_poll_s: float = Field(default=5.0, gt=0)
    interruption_margin_s: float = Field(
        default=10.0, ge=0, description="Kept back from the notice to report and flush logs"
    )
    # A recommendation is often not followed by an interruption, and one that is brings its
    # own notice: stopping every trial on it cost more than it saved (docs/configuration.md).
    rebalance_action: Literal["preempt", "drain", "ignore"] = "drain"
    # --- logs and metrics ----------------------------------------------------------------
    log_flush_interval_s: float = Field(default=1.0, gt=0)
    cloudwatch_log_group: str | None = None
    cloudwatch_log_stream: str | None = Field(
        default=None, description="Prefix of the stream names: <prefix>/<instance>/<trial>"
    )
    cloudwatch_metrics_namespace: str | None = None
    cloudwatch_metrics_interval_s: float = Field(default=60.0, gt=0)
    tick_s: float = Field(default=1.0, gt=0, description="Main loop period")
    # --- trial credentials and the metadata guard (docs/security.md "Trial credentials") --
    trial_role_arn: str | None = Field(
        default=None,
        description="The deployment's TrialRole: each trial gets a session of its own, served "
        "on the container-credentials endpoint. None: trials get no AWS credentials",
    )
    trial_credentials_port: int = Field(default=51680, ge=0, le=65535)
    metadata_guard: Literal["auto", "enforce", "off"] = Field(
        default="auto",
        description="Firewall rules that keep trials from the metadata service: auto applies "
        "them on ec2/gce and warns if it cannot; enforce refuses to start without them",
    )
    trial_cgroup_parent: str | None = Field(
        default="corral.slice",
        description="Docker cgroup parent of trial containers, outside system.slice: the "
        "metadata guard matches host-network trials by it",
    )

    trial_service_account: str | None = Field(
        default=None,
        description="GCE: the account each trial gets tokens of; default: corral-trial@ in "
        "the project of the instance's corral-agent@ account (infra/gcp/deploy.sh)",
    )
    gce_iam_credentials_url: str = "https://iamcredentials.googleapis.com"

    @field_validator("trial_role_arn")
    @classmethod
    def _role_arn(cls, value: str | None) -> str | None:
        if value is not None and not ROLE_ARN.match(value):
            raise ValueError(f"trial_role_arn: not an IAM role ARN: {value!r}")
        return value

    @field_validator("gloo_port_range", "nccl_port_range")
    @classmethod
    def _port_range(cls, value: str | None) -> str | None:
        if value is None:
            return None
        low, high = parse_port_range(value)  # its ValueError names the problem
        return f"{low}:{high}"

    @model_validator(mode="after")
    def _check(self) -> AgentConfig:
        if self.auth == "dev" and self.dev_token is None:
            raise ValueError("auth 'dev' needs dev_token (or CORRAL_AGENT_DEV_TOKEN)")
        if self.resolved_cloud == "dev" and not self.dev_instance_id:
            raise ValueError("a dev identity needs dev_instance_id")
        return self

    @property
    def resolved_cloud(self) -> CloudKind:
        if self.cloud is not None:
            return self.cloud
        return {"aws": "ec2", "gce": "gce", "dev": "dev"}[self.auth]  # type: ignore[return-value]

    def proxy_env(self) -> dict[str, str]:
        """Proxy variables in both spellings: tools disagree on which one they read."""
        env: dict[str, str] = {}
        for name, value in (
            ("http_proxy", self.http_proxy),
            ("https_proxy", self.https_proxy),
            ("no_proxy", self.no_proxy),
        ):
            if value:
                env[name] = value
                env[name.upper()] = value
        return env


def load_config(path: Path | None = None, environ: Mapping[str, str] | None = None) -> AgentConfig:
    """Read the file (if any), apply ``CORRAL_AGENT_*`` overrides, validate."""
    env = os.environ if environ is None else environ
    if path is None and env.get(CONFIG_ENV):
        path = Path(env[CONFIG_ENV])
    if path is None and DEFAULT_PATH.exists():
        path = DEFAULT_PATH
    data: dict[str, Any] = {}
    if path is not None:
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: the agent config must be a mapping")
        data.update(loaded)
    data.update(_env_overrides(env))
    if "ec2_metadata_url" not in data and env.get(EC2_METADATA_ENV):
        data["ec2_metadata_url"] = env[EC2_METADATA_ENV]
    unknown = sorted(set(data) - set(AgentConfig.model_fields))
    if unknown:
        # Ignored, not refused: a newer control plane may write keys an older agent lacks.
        log.warning("ignoring unknown agent config keys: %s", ", ".join(unknown))
    return AgentConfig.model_validate(data)


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, info in AgentConfig.model_fields.items():
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is None:
            continue
        if "list" in str(info.annotation):
            # Lists (shutdown_command) come as JSON; a bare string is one shell command.
            out[name] = json.loads(raw) if raw.lstrip().startswith("[") else ["sh", "-c", raw]
        elif raw.lstrip().startswith("{") and (
            "Map" in str(info.annotation) or "Auth" in str(info.annotation)
        ):
            out[name] = json.loads(raw)  # an image map, registry credentials
        elif raw == "" and info.default is None:
            out[name] = None
        else:
            out[name] = raw
    return out
