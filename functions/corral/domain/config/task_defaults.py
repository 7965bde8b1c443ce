"""``task_container_defaults``: what every trial container of a pool gets from the cluster.

Determined's master.yaml has the block at the top level and, overriding it, in each resource
pool. Corral reads the same two places and keeps the keys it has a use for: the GLOO and NCCL
port ranges (the agents' firewall must open them, see infra/network.yaml and
infra/gcp/firewall.sh), the default ``image`` of trials that name none and the
``registry_auth`` it is pulled with. Determined's other keys (shm size, bind mounts...) belong
to each experiment config in Corral; the Determined import ignores them with a warning
(``legacy.py``). A pool's block wins over the top-level one key by key. The image is applied at
submission (``image_for``), so the trial record names the image that ran; the block also
reaches the agent through the bootstrap (``corral.bootstrap.render``): the port ranges as
``GLOO_PORT_RANGE`` and ``NCCL_PORT_RANGE`` (unset: any port, as in Determined), the image as
the agent's fallback for trials stored before it was set, ``registry_auth`` for its pulls.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, field_serializer

from corral.domain.config.errors import field_error
from corral.domain.images import DEFAULT_IMAGE_CPU, DEFAULT_IMAGE_GPU
from corral.protocol.port_ranges import parse_port_range

# The keys Corral reads; Determined's others are ignored on import.
PORT_RANGE_KEYS = ("gloo_port_range", "nccl_port_range")
KEPT_KEYS = (*PORT_RANGE_KEYS, "image", "registry_auth")


def _port_range(value: object) -> object:
    if value is None or not isinstance(value, str):
        return value  # pydantic reports the type
    try:
        low, high = parse_port_range(value)
    except ValueError as exc:
        raise field_error(str(exc)) from None
    return f"{low}:{high}"  # one spelling from here on (the one NCCL/GLOO variables take)


PortRange = Annotated[str, BeforeValidator(_port_range)]
_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ImageMap(BaseModel):
    """Determined's ``{cpu: ..., gpu: ...}`` image: one for trials without GPUs, one for trials
    with (``cuda`` is Determined's newer spelling of ``gpu``)."""

    model_config = _CONFIG

    cpu: Annotated[str, Field(min_length=1)] | None = None
    """Image of trials with no GPU (`slots_per_trial: 0`, or in a pool of zero-GPU types)."""
    gpu: Annotated[str, Field(min_length=1)] | None = None
    """Image of trials with GPUs (`cuda` is accepted for it)."""
    rocm: str | None = None
    """Determined's image for AMD GPUs: accepted, not used (Corral's agents drive NVIDIA GPUs)."""

    @classmethod
    def _cuda(cls, value: object) -> object:
        if isinstance(value, dict) and not {"cpu", "gpu", "cuda"} & set(value):
            raise field_error("must name an image for cpu, gpu or both")
        if isinstance(value, dict) and "cuda" in value:
            value = dict(value)
            cuda = value.pop("cuda")
            if value.setdefault("gpu", cuda) != cuda:
                raise field_error("gpu and cuda differ: set only one")
        return value

    def pick(self, gpus: bool) -> str | None:
        """The entry for the trial's kind; None when the map leaves it out, so the next
        default applies (Determined fills a map's missing entry from the defaults)."""
        return self.gpu if gpus else self.cpu


def _image(value: object) -> object:
    if isinstance(value, dict):
        return ImageMap._cuda(value)
    if isinstance(value, str) and (not value.strip() or "\0" in value):
        raise field_error(
            "must not be empty" if not value.strip() else "must not contain a NUL character"
        )
    return value


# An image name, or a map by trial kind; ``image_for`` picks.
Image = Annotated[str | ImageMap, BeforeValidator(_image)]


def image_for(image: str | ImageMap | None, gpus: bool) -> str | None:
    """The image a trial runs in: a string as it is, a map's ``gpu`` or ``cpu`` entry."""
    if image is None or isinstance(image, str):
        return image
    return image.pick(gpus)


def image_config(image: str | ImageMap | None) -> str | dict[str, str] | None:
    """The image as the agent config spells it (a name, or ``{cpu, gpu}``)."""
    if image is None or isinstance(image, str):
        return image
    return {k: v for k, v in (("cpu", image.cpu), ("gpu", image.gpu)) if v}


class RegistryAuth(BaseModel):
    """Docker registry credentials (Docker's ``AuthConfig``, as Determined takes them). The
    password is a secret: never shown by the API, events or logs (``**********``)."""

    model_config = _CONFIG

    username: str | None = None
    """Registry user name."""
    password: SecretStr | None = None
    """Password or token; shown as `**********` everywhere but the pull."""
    serveraddress: str | None = None
    """Registry host, e.g. `123456789012.dkr.ecr.us-east-1.amazonaws.com`; none: Docker Hub."""
    email: str | None = None
    """Accepted for Determined compatibility; registries ignore it."""

    # Stored with its experiment (the agent needs it); masked by repr, and by the API
    # (corral.api.views) and events, which never show a stored config's password.
    @field_serializer("password", when_used="json")
    def _clear(self, value: SecretStr | None) -> str | None:
        return value.get_secret_value() if value is not None else None


class TaskContainerDefaults(BaseModel):
    # FrozenModel's settings; not FrozenModel itself, which common.py (its home) imports this
    # module for CommonProvider. No cross-field rules here to collect.
    model_config = _CONFIG

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

    image: Image | None = Field(
        default=None,
        description=(
            "Image of trials whose config names none: a name, or `{cpu: ..., gpu: ...}` by "
            "whether the trial has GPUs. Applied at submission (the trial record names it); "
            "unset: Corral's default (see Default task image)"
        ),
    )
    registry_auth: RegistryAuth | None = Field(
        default=None,
        description=(
            "Credentials the agents pull trial images with (`username`, `password`, "
            "`serveraddress`) when the experiment gives none; delivered in the instances' "
            "bootstrap (see Registry credentials)"
        ),
    )

    def over(self, base: TaskContainerDefaults) -> TaskContainerDefaults:
        """These settings where set, ``base``'s elsewhere (a pool's block over the cluster's)."""
        return TaskContainerDefaults(
            gloo_port_range=self.gloo_port_range or base.gloo_port_range,
            nccl_port_range=self.nccl_port_range or base.nccl_port_range,
            image=self.image if self.image is not None else base.image,
            registry_auth=self.registry_auth or base.registry_auth,
        )

    def agent_config(self) -> dict[str, object]:
        """The agent config keys of this block besides the port ranges: the fallback image of
        trials stored without one, and the registry credentials (in the clear: the agent
        config file is root's alone, docs/configuration.md says who else can read it)."""
        out: dict[str, object] = {}
        if self.image is not None:
            out["default_trial_image"] = image_config(self.image)
        if self.registry_auth is not None:
            # The agent reads it as corral.protocol.agent.RegistryAuth (its docker_auth()).
            out["registry_auth"] = self.registry_auth.model_dump(mode="json", exclude_none=True)
        return out

    def default_image(self, gpus: bool) -> str:
        """The image of a trial whose config names none: this block's, else Corral's."""
        return image_for(self.image, gpus) or (DEFAULT_IMAGE_GPU if gpus else DEFAULT_IMAGE_CPU)
