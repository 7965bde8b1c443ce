"""``task_container_defaults``: what every trial container of a pool gets from the cluster.

Determined's master.yaml has the block at the top level and, overriding it, in each resource
pool. Corral reads the same two places and keeps the two keys that matter to the network: the
GLOO and NCCL port ranges (the agents' firewall must open them, see infra/network.yaml and
infra/gcp/firewall.sh). Determined's other keys (images, shm size, bind mounts...) belong to
each experiment config in Corral; the Determined import ignores them with a warning
(``legacy.py``). A pool's block wins over the top-level one key by key; the result reaches the
agent through the bootstrap (``corral.bootstrap.render``) and the trial as ``GLOO_PORT_RANGE``
and ``NCCL_PORT_RANGE``. Unset means any port, as in Determined.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from corral.domain.config.errors import field_error
from corral.protocol.port_ranges import parse_port_range

# The keys Corral reads; Determined's others are ignored on import.
PORT_RANGE_KEYS = ("gloo_port_range", "nccl_port_range")


def _port_range(value: object) -> object:
    if value is None or not isinstance(value, str):
        return value  # pydantic reports the type
    try:
        low, high = parse_port_range(value)
    except ValueError as exc:
        raise field_error(str(exc)) from None
    return f"{low}:{high}"  # one spelling from here on (the one NCCL/GLOO variables take)


PortRange = Annotated[str, BeforeValidator(_port_range)]


class TaskContainerDefaults(BaseModel):
    # FrozenModel's settings; not FrozenModel itself, which common.py (its home) imports this
    # module for CommonProvider. No cross-field rules here to collect.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    gloo_port_range: PortRange | None = Field(
        default=None,
        description=(
            "Ports GLOO uses between trial containers, LOW:HIGH (or LOW-HIGH); unset: any "
            "port. Given to trials as GLOO_PORT_RANGE; the agents' firewall must open it"
        ),
    )
    nccl_port_range: PortRange | None = Field(
        default=None,
        description=(
            "Ports NCCL uses between trial containers, LOW:HIGH (or LOW-HIGH); unset: any "
            "port. Given to trials as NCCL_PORT_RANGE; the agents' firewall must open it"
        ),
    )

    def over(self, base: TaskContainerDefaults) -> TaskContainerDefaults:
        """These settings where set, ``base``'s elsewhere (a pool's block over the cluster's)."""
        return TaskContainerDefaults(
            gloo_port_range=self.gloo_port_range or base.gloo_port_range,
            nccl_port_range=self.nccl_port_range or base.nccl_port_range,
        )
