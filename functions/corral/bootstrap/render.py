"""Render the agent bootstrap script (EC2 user data, GCE ``startup-script``).

Stdlib only: this runs in the scale-up function on every launch. The script runs the pool's
``startup_script`` first and aborts the boot if it fails, writes ``/etc/corral/agent.yaml``
(JSON, which YAML readers accept), installs the agent if asked, and starts it under systemd
(or nohup where there is no systemd). ``CORRAL_BOOTSTRAP_ROOT`` (a path prefix: everything
the script writes and the agent it starts are under it; the local stack's machines boot with
it set to their disk) and ``CORRAL_BOOTSTRAP_DRY_RUN=1`` (print install/start commands
instead of running them; tests) are never set on a real instance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Protocol

from corral.domain.errors import LaunchError, LaunchErrorClass

EC2_USER_DATA_LIMIT = 16_384  # bytes, before base64; GCE allows 256 KB per metadata value


class UnsafeValue(ValueError):
    """A value the script cannot carry as written (a NUL character)."""


@dataclass(frozen=True)
class BootstrapSettings:
    api_url: str
    auth: str  # "aws" | "gce" | "dev"
    pool: str
    record_id: str | None = None
    startup_script: str | None = None
    container_startup_script: str | None = None
    expected_gpus: int | None = None
    agent_docker_network: str | None = "corral"
    agent_docker_runtime: str | None = None
    agent_reconnect_attempts: int = 5
    agent_reconnect_backoff: float = 5.0
    dead_man_switch_s: float | None = None
    http_proxy: str | None = None
    https_proxy: str | None = None
    no_proxy: str | None = None
    cloudwatch_log_group: str | None = None
    cloudwatch_metrics_namespace: str | None = None
    aws_region: str | None = None
    # task_container_defaults' port ranges ("LOW:HIGH"), given to trials as GLOO_PORT_RANGE
    # and NCCL_PORT_RANGE; None: any port.
    gloo_port_range: str | None = None
    nccl_port_range: str | None = None
    agent_wheel_url: str | None = None  # None: use the corral-agent baked into the image
    agent_settings: Mapping[str, object] = field(default_factory=dict)  # any other key

    def agent_config(self) -> dict[str, object]:
        config: dict[str, object] = {
            "api_url": self.api_url,
            "auth": self.auth,
            "pool": self.pool,
            "record_id": self.record_id,
            "container_startup_script": self.container_startup_script,
            "expected_gpus": self.expected_gpus,
            "agent_docker_network": self.agent_docker_network,
            "agent_docker_runtime": self.agent_docker_runtime,
            "agent_reconnect_attempts": self.agent_reconnect_attempts,
            "agent_reconnect_backoff": self.agent_reconnect_backoff,
            "dead_man_switch_s": self.dead_man_switch_s,
            "http_proxy": self.http_proxy,
            "https_proxy": self.https_proxy,
            "no_proxy": self.no_proxy,
            "cloudwatch_log_group": self.cloudwatch_log_group,
            "cloudwatch_metrics_namespace": self.cloudwatch_metrics_namespace,
            "aws_region": self.aws_region,
            "gloo_port_range": self.gloo_port_range,
            "nccl_port_range": self.nccl_port_range,
        }
        config.update(self.agent_settings)
        # Unset keys are left out so the agent's own defaults apply.
        return {k: v for k, v in config.items() if v is not None}


class PortRanges(Protocol):
    """A pool's effective ``task_container_defaults`` (corral.domain.config.task_defaults)."""

    @property
    def gloo_port_range(self) -> str | None: ...
    @property
    def nccl_port_range(self) -> str | None: ...
    def agent_config(self) -> dict[str, object]:
        """Its other keys the agent takes (default image, registry credentials)."""
        ...


class AgentSettingsSource(Protocol):
    """A pool's ``agent_settings`` block (corral.domain.config.agent_settings)."""

    @property
    def agent_wheel_url(self) -> str | None: ...
    def agent_config(self) -> dict[str, object]: ...


class AgentSource(Protocol):
    """The provider-block fields every cloud's agent bootstrap takes (CommonProvider)."""

    @property
    def master_url(self) -> str | None: ...
    @property
    def startup_script(self) -> str | None: ...
    @property
    def container_startup_script(self) -> str | None: ...
    @property
    def agent_docker_network(self) -> str | None: ...
    @property
    def agent_docker_runtime(self) -> str | None: ...
    @property
    def agent_reconnect_attempts(self) -> int: ...
    @property
    def agent_reconnect_backoff(self) -> float: ...
    @property
    def task_defaults(self) -> PortRanges: ...
    @property
    def agent_settings(self) -> AgentSettingsSource: ...


def settings_for(
    provider: AgentSource,
    *,
    pool: str,
    record_id: str,
    expected_gpus: int,
    auth: str,
    default_api_url: str | None,
    **cloud_specific: object,
) -> BootstrapSettings:
    """The bootstrap of one launch from the pool's provider block: the pool's ``master_url``
    if it names one, else the deployment's own API URL. The pool's ``agent_settings`` and the
    agent's keys of its ``task_container_defaults`` go to the agent config as they are; a
    cloud's own ``agent_settings`` (in ``cloud_specific``) are added over them."""
    api_url = provider.master_url or default_api_url
    if not api_url:
        raise ValueError(
            "no API URL for the agent: set master_url on the pool, or deploy with the "
            "API URL known to the scale-up function (CORRAL_API_URL)"
        )
    return BootstrapSettings(
        api_url=api_url,
        auth=auth,
        pool=pool,
        record_id=record_id,
        startup_script=provider.startup_script,
        container_startup_script=provider.container_startup_script,
        expected_gpus=expected_gpus,
        agent_docker_network=provider.agent_docker_network,
        agent_docker_runtime=provider.agent_docker_runtime,
        agent_reconnect_attempts=provider.agent_reconnect_attempts,
        agent_reconnect_backoff=provider.agent_reconnect_backoff,
        gloo_port_range=provider.task_defaults.gloo_port_range,
        nccl_port_range=provider.task_defaults.nccl_port_range,
        agent_wheel_url=provider.agent_settings.agent_wheel_url,
        agent_settings={
            **provider.task_defaults.agent_config(),
            **provider.agent_settings.agent_config(),
            **_mapping(cloud_specific.pop("agent_settings", None)),
        },
        **cloud_specific,  # type: ignore[arg-type]
    )


def _mapping(value: object) -> dict[str, object]:
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else {}


def launch_script(
    make_settings: Callable[[], BootstrapSettings], max_bytes: int, too_large_code: str
) -> str:
    """The bootstrap of one launch, or a LaunchError that fails the record with the reason:
    no API URL for the agent (``NoApiUrl``), a value it cannot carry (``UnsafeValue``), or a
    script over the cloud's size limit."""
    try:
        settings = make_settings()
    except ValueError as error:
        raise LaunchError(LaunchErrorClass.INVALID_CONFIG, "NoApiUrl", str(error)) from error
    try:
        return render_bootstrap(settings, max_bytes)
    except UnsafeValue as error:
        raise LaunchError(LaunchErrorClass.INVALID_CONFIG, "UnsafeValue", str(error)) from error
    except ValueError as error:
        raise LaunchError(LaunchErrorClass.INVALID_CONFIG, too_large_code, str(error)) from error


def check_script_size(script: str, max_bytes: int, too_large_code: str, reason: str) -> None:
    """Refuse a bootstrap over the cloud's size limit before the cloud is called. ``reason``
    is the message with ``{size}`` for the script's bytes (``user data is {size} bytes, EC2
    allows 16384``)."""
    size = len(script.encode())
    if size > max_bytes:
        raise LaunchError.invalid_config(too_large_code, reason.format(size=size))


def render_bootstrap(settings: BootstrapSettings, max_bytes: int = EC2_USER_DATA_LIMIT) -> str:
    template = resources.files("corral.bootstrap").joinpath("agent_bootstrap.sh.tmpl")
    text = template.read_text(encoding="utf-8")
    config = json.dumps(settings.agent_config(), indent=1, sort_keys=True)
    startup = settings.startup_script or "true\n"
    if not startup.endswith("\n"):
        startup += "\n"
    values = {
        "@@STARTUP_DELIM@@": _delimiter("CORRAL_STARTUP_EOF", startup),
        "@@CONFIG_DELIM@@": _delimiter("CORRAL_CONFIG_EOF", config),
        "@@WHEEL_URL@@": _quote(settings.agent_wheel_url or ""),
        # Only in the header comment: JSON-escaped, so a newline in it cannot end the comment
        # and start a command (a pool named "gpu\nreboot" would reboot every instance).
        "@@POOL@@": json.dumps(settings.pool),
        "@@STARTUP_SCRIPT@@\n": startup,
        "@@AGENT_CONFIG@@": config,
    }
    # One pass: text substituted in is never scanned again, so a user's script that happens
    # to contain "@@...@@" stays as written.
    out = re.sub("|".join(re.escape(k) for k in values), lambda m: values[m.group(0)], text)
    if "\x00" in out:
        # bash cannot hold a NUL in a word and drops it from a heredoc: the script would not
        # run what was written. The agent config is JSON (escaped): only the others can.
        raise UnsafeValue(
            "bootstrap script would contain a NUL character: remove it from pool, "
            "startup_script or agent_wheel_url"
        )
    size = len(out.encode())
    if size > max_bytes:
        raise ValueError(
            f"bootstrap script is {size} bytes, over the {max_bytes}-byte user-data limit: "
            "shorten startup_script or container_startup_script"
        )
    return out


def _delimiter(base: str, body: str) -> str:
    """A heredoc delimiter that no line of the body equals (quoted heredocs: no expansion)."""
    lines = set(body.splitlines())
    n = 0
    while (name := f"{base}_{n}") in lines:
        n += 1
    return name


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"
