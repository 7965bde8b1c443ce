"""``agent_settings``: a pool's settings for the agent on each of its instances.

Each field is a key of the agent's own config (``agent_runtime/config.py``, docs/agent.md) and
reaches ``/etc/corral/agent.yaml`` through the bootstrap script the pool's launches carry (EC2
user data, GCE ``startup-script``): the names are the agent's, which are Determined's where
Determined's agent has the setting (``http_proxy``, ``https_proxy``, ``no_proxy``), so a
Determined ``agent_config_file_contents`` block maps key by key (``determined.py``). Unset
fields are left out of the agent config, so the agent's own defaults apply.

The provider blocks hold it (``aws.py``, ``gcp.py``); AWS pools add the CloudWatch metrics
namespace. Not in ``common.py``: that module is the base these models build on.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from corral.domain.config.common import FrozenModel
from corral.domain.config.durations import Duration, PositiveDuration
from corral.domain.config.errors import field_error, matching

RebalanceAction = Literal["preempt", "drain", "ignore"]
# What the agent does on an EC2 rebalance recommendation. A recommendation names no deadline
# and is often not followed by an interruption; one that is followed brings its own two-minute
# notice, on which the trials checkpoint and are requeued anyway. "preempt" stopped every trial
# on every recommendation (its work since the last checkpoint, its restart, often a new
# instance); "drain" costs only the new work this instance would have taken, and is what the
# control plane does on the EventBridge event. docs/configuration.md ("Rebalance
# recommendations") has the reasoning.
REBALANCE_DEFAULT: RebalanceAction = "drain"

_URL = re.compile(r"^https?://[^\s/]+\S*$")


def _url(value: str) -> str:
    if not _URL.match(value):
        raise field_error(f"must be an http:// or https:// URL, got {value!r}")
    return value


Url = Annotated[str, AfterValidator(_url)]
_NO_PROXY = matching(re.compile(r"^[^\s]*$"), "must be a comma-separated list without spaces")
_METRICS_NAMESPACE = matching(
    # CloudWatch's rule: 1-255 of these characters, not starting with ':' nor "AWS/".
    re.compile(r"^(?!AWS/)(?!:)[A-Za-z0-9.\-_/#:]{1,255}$"),
    "must be a CloudWatch namespace: 1-255 letters, digits, '.', '-', '_', '/', '#' or ':', not "
    "starting with ':' or 'AWS/'",
)

# Config field -> agent config key, where they differ (durations are seconds on the agent).
_AGENT_KEYS = {
    "stop_grace_period": "stop_grace_s",
    "interruption_poll_period": "interruption_poll_s",
    "interruption_margin": "interruption_margin_s",
}


class AgentSettings(FrozenModel):
    """Settings of the agents of one pool, written to their ``/etc/corral/agent.yaml``."""

    http_proxy: Url | None = None
    """Proxy for HTTP: the agent's requests to the API (unless `no_proxy` covers it) and every
    trial's `http_proxy`/`HTTP_PROXY`. Determined's agent setting of the same name."""
    https_proxy: Url | None = None
    """Proxy for HTTPS, used as `http_proxy` is."""
    no_proxy: Annotated[str, _NO_PROXY] | None = None
    """Hosts and domains reached without the proxies, comma-separated (`169.254.169.254` and the
    metadata servers are never proxied)."""
    run_as_uid: int | None = Field(default=None, ge=0)
    """POSIX user id trials run as (Determined's agent-user link for everyone): the container's
    `user`, or the process executor's user. None: the image's user (Docker) or the agent's."""
    run_as_gid: int | None = Field(default=None, ge=0)
    """POSIX group id trials run as; with `run_as_uid`."""
    stop_grace_period: Duration | None = None
    """SIGTERM to SIGKILL when a trial is stopped (an order, or SIGTERM to the agent). None: the
    agent's 30 s."""
    interruption_poll_period: PositiveDuration | None = None
    """How often the agent reads the interruption notice endpoints. None: 5 s."""
    interruption_margin: Duration | None = None
    """Kept back from an interruption notice's window to report the trials and flush their logs
    (EC2: 120 s notice, so trials get 110 s with the default 10 s)."""
    rebalance_action: RebalanceAction = REBALANCE_DEFAULT
    """What the agent does on an EC2 rebalance recommendation: `drain` (take no new work; running
    trials go on until an interruption notice, which still stops them with its grace period),
    `preempt` (stop every trial now, to checkpoint and requeue elsewhere) or `ignore`. Default
    `drain`: see Rebalance recommendations below. GCE sends none."""
    agent_wheel_url: Url | None = None
    """Install the agent at boot from this wheel (`pip install "corral[agent] @ URL"`) instead of
    using the machine image's; costs boot time and a network dependency."""

    def agent_config(self) -> dict[str, Any]:
        """The agent config keys these settings set (unset ones left out). ``agent_wheel_url`` is
        the bootstrap's own, not the agent's, and is left out too."""
        out: dict[str, Any] = {}
        for name, value in self.model_dump(exclude={"agent_wheel_url"}).items():
            if value is not None:
                out[_AGENT_KEYS.get(name, name)] = value
        return out


class AwsAgentSettings(AgentSettings):
    cloudwatch_metrics_namespace: Annotated[str, _METRICS_NAMESPACE] | None = None
    """CloudWatch namespace the agents put their GPU metrics in (`GPUUtilization`,
    `GPUMemoryUsed`). The stack's agent role may put metrics only in its `AgentMetricsNamespace`:
    left out, the deployment's (`CORRAL_AGENT_METRICS_NAMESPACE`), with a warning. None: no GPU
    metrics in CloudWatch."""
