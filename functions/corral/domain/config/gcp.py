"""The GCP provider block of a resource pool (`type: gcp`), with Determined's field names."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from corral.domain import catalog
from corral.domain.config.agent_settings import AgentSettings
from corral.domain.config.common import (
    HOURS_PER_MONTH,
    PD_BALANCED_USD_PER_GB_MONTH,
    CommonProvider,
    FrozenModel,
    OneOrMany,
    Ownership,
    RuleProblems,
    StrList,
    rule,
    unique,
)
from corral.domain.config.durations import PositiveDuration
from corral.domain.config.errors import field_error, matching, rule_error
from corral.domain.offerings import CapacityType, Offering

# The GCE accelerator types we know (the seed's six plus current ones); kept as a Literal so a
# typo is caught with the list of valid names. A unit test keeps it in step with the catalog.
GpuType = Literal[
    "nvidia-tesla-t4",
    "nvidia-tesla-p4",
    "nvidia-tesla-p100",
    "nvidia-tesla-v100",
    "nvidia-tesla-k80",
    "nvidia-tesla-a100",
    "nvidia-a100-80gb",
    "nvidia-l4",
    "nvidia-rtx-pro-6000",
    "nvidia-h100-80gb",
    "nvidia-h100-mega-80gb",
    "nvidia-h200-141gb",
    "nvidia-b200",
    "nvidia-gb200",
]
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_DISK_TYPE = re.compile(r"^[a-z][-a-z0-9]{0,62}$")

LABEL_RULE = "lowercase letters, digits, '_' and '-', at most 63 characters"

# Field checks: the pattern each string must match, and what the error says it must be.
check_label_key = matching(
    _LABEL_KEY, f"must be a GCP label key ({LABEL_RULE}, starting with a letter)", echo=False
)
check_label_value = matching(_LABEL_VALUE, f"must be a GCP label value ({LABEL_RULE})", echo=False)
_ZONE = matching(
    re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$"), "must be a GCE zone such as us-central1-a"
)
_NETWORK_TAG = matching(
    re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"),
    "must be a GCE network tag (lowercase, digits, '-')",
)
_PROJECT = matching(
    re.compile(r"^([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$"),
    "must be a GCP project id such as my-project-123",
)
_NAME_PREFIX = matching(
    re.compile(r"^[a-z][-a-z0-9]{0,49}$"),  # room for the suffix GCE names need
    "must start with a lowercase letter and use only lowercase letters, digits and '-', at "
    "most 50 characters",
    echo=False,
)


class GcpNetworkInterface(FrozenModel):
    network: str = "global/networks/default"
    """VPC network of the agents."""
    subnetwork: str | None = None
    """Subnetwork of the agents; none: the network's subnetwork in the zone's region."""
    external_ip: bool = False  # Determined's default: use Cloud NAT or set this to true
    """Give agents an external IP. Determined's default is false: use Cloud NAT, or set it."""


# The project's default compute service account (PROJECT_NUMBER-compute@...).
_DEFAULT_COMPUTE_ACCOUNT = re.compile(r"^\d+-compute@developer\.gserviceaccount\.com$")


class GcpServiceAccount(FrozenModel):
    email: str = ""  # empty: the project's default compute service account
    """Service account of the agents. Left out: the deployment's agent account
    (`CORRAL_AGENT_SERVICE_ACCOUNT`, `corral-agent@<project>` with deploy.sh), with a warning;
    with none known, the project's default compute account, with a warning that its agents cannot
    register. Naming the default compute account is refused: deploy.sh lets scale_up attach only
    the agent account, and the API accepts only the agent accounts it is given."""

    @field_validator("email")
    @classmethod
    def _not_default_compute(cls, value: str) -> str:
        if _DEFAULT_COMPUTE_ACCOUNT.match(value):
            raise field_error(
                f"{value!r} is the project's default compute service account: scale_up may "
                "not attach it and the API refuses its agents; use the agent account "
                "(corral-agent@<project>.iam.gserviceaccount.com with deploy.sh)"
            )
        return value

    scopes: Annotated[StrList, Field(min_length=1)] = (CLOUD_PLATFORM_SCOPE,)
    """OAuth scopes of the agents (best practice: `cloud-platform` alone, and IAM roles on the
    account)."""


class GcpInstanceType(FrozenModel):
    """A machine type with its GPUs: attached (N1, predefined or custom) or built in (A2, G2,
    G4, A3, A4, A4X). ``gpu_num: 0`` means no GPUs, whatever ``gpu_type`` says (as in
    Determined, whose renders name the GPU type of a CPU pool with ``gpu_num: 0``)."""

    machine_type: str = "n1-standard-32"
    """GCE machine type; N1 custom types (`custom-8-30720`) take attached GPUs like `n1-*`."""
    gpu_type: GpuType | None = None
    """Accelerator type; built into A2, G2, G4, A3, A4 and A4X machines, where it may be left out.
    The counts GCE allows are listed below the table."""
    gpu_num: int = Field(default=0, ge=0)
    """GPUs attached; `0` means none, whatever `gpu_type` says (as in Determined). For machines with
    built-in GPUs: 0 or the machine's count."""
    preemptible: bool = False  # legacy spelling of a Spot VM
    """Legacy spelling: this shape launches as a Spot VM."""

    @rule
    def _check_gpus(self) -> RuleProblems:
        machine = catalog.lookup_gcp_machine(self.machine_type)
        if machine is not None and machine.gpus:
            # GPUs come with the machine: a config may restate them but not contradict them.
            if self.gpu_type is not None and self.gpu_type != machine.gpu_model:
                yield rule_error(
                    "gpu_type", f"{self.machine_type} comes with {machine.gpu_model} GPUs"
                )
            if self.gpu_num not in (0, machine.gpus):
                yield rule_error(
                    "gpu_num", f"{self.machine_type} comes with exactly {machine.gpus} GPUs"
                )
            return
        if self.gpu_type is None:
            if self.gpu_num:
                yield rule_error("gpu_type", "required when gpu_num is set")
            return
        if self.gpu_num == 0:
            return  # no GPUs attached: gpu_type is only a name here
        gpu = catalog.GCP_GPUS[self.gpu_type]
        if self.gpu_num not in gpu.allowed_counts:
            counts = [str(n) for n in gpu.allowed_counts]
            allowed = counts[0] if len(counts) == 1 else f"{', '.join(counts[:-1])} or {counts[-1]}"
            yield rule_error("gpu_num", f"must be {allowed} for {self.gpu_type} (GCE limit)")
        n1 = catalog.takes_attached_gpus(self.machine_type)
        if n1 and not gpu.attachable_to_n1:
            yield rule_error(
                "gpu_type",
                f"{self.gpu_type} cannot be attached to {self.machine_type}; use a machine "
                "type that has it built in (a2, g2, g4, a3, a4, a4x)",
            )
        elif not n1 and gpu.attachable_to_n1:
            yield rule_error(
                "gpu_type",
                f"GCE attaches {self.gpu_type} to N1 machine types only (n1-*, custom-*)",
            )

    @property
    def gpus(self) -> int:
        return catalog.gpus_for("gcp", self.machine_type, self.gpu_num) or 0

    @property
    def effective_gpu_type(self) -> str | None:
        machine = catalog.lookup_gcp_machine(self.machine_type)
        if machine is not None and machine.gpus:
            return machine.gpu_model
        return self.gpu_type if self.gpu_num else None

    @property
    def offering_name(self) -> str:
        """``machine_type``, or ``machine_type+<n>x<gpu_type>`` when GPUs are attached."""
        machine = catalog.lookup_gcp_machine(self.machine_type)
        if self.gpu_type is None or not self.gpu_num or (machine is not None and machine.gpus):
            return self.machine_type
        return f"{self.machine_type}+{self.gpu_num}x{self.gpu_type}"


class GcpProvider(CommonProvider):
    type: Literal["gcp"]
    """Selects the GCP provider block."""
    project: Annotated[str, _PROJECT]
    """GCP project id instances launch in. Left out: the deployment's project, with a warning (see
    Deployment defaults)."""
    zone: Annotated[
        tuple[Annotated[str, _ZONE], ...],
        OneOrMany,
        Field(min_length=1),
        AfterValidator(unique),
    ]
    """Zones to launch in, e.g. `us-central1-a`; each is an offering location. Left out: the
    deployment's zone(s) (`CORRAL_ZONE`)."""
    boot_disk_size: int = Field(default=200, ge=100)
    """Boot disk size in GB."""
    boot_disk_source_image: str
    """Agent image, e.g. `projects/<p>/global/images/<name>` (built by `infra/agent-image/`). Left
    out: the deployment's agent image (`CORRAL_AGENT_IMAGE`)."""
    # A GCE disk type (pd-balanced, pd-ssd, hyperdisk-balanced, ...); Determined's spelling as a
    # URL (projects/p/zones/z/diskTypes/pd-ssd) is accepted. None: GCE's default.
    boot_disk_type: str | None = None
    """Boot disk type (`pd-balanced`, `pd-ssd`, `hyperdisk-balanced`, ...); Determined's URL form
    `projects/<p>/zones/<z>/diskTypes/pd-ssd` is accepted (its last part is used). None: GCE's
    default."""
    base_config: dict[str, Any] = Field(default_factory=dict)  # merged into the insert body
    """Merged into the instance insert body (e.g. extra `disks`)."""
    label_key: Annotated[str, check_label_key] = "managed-by"
    """Key of the ownership label: Corral only ever touches instances carrying `label_key:
    label_value`. GCP label rules: lowercase letters, digits, `_`, `-`, at most 63 characters,
    starting with a letter."""
    label_value: Annotated[str, check_label_value] = "corral"
    """Value of the ownership label; not empty, GCP label rules. Make the pair unique per
    installation."""
    name_prefix: Annotated[str, _NAME_PREFIX] = "corral-agent"
    """Instance names are this prefix plus a suffix: a lowercase letter, then lowercase letters,
    digits and `-`, at most 50 characters."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels on instances (GCP label rules; not the ownership `label_key`)."""
    network_interface: GcpNetworkInterface = GcpNetworkInterface()
    """Network settings of the agents."""
    network_tags: tuple[Annotated[str, _NETWORK_TAG], ...] = ()
    """Network tags of the agents, for firewall rules: they must include the tag the firewall
    rules target (`infra/gcp/firewall.sh`: `corral-agent`), or trials spanning instances hang.
    Left out: the deployment's tag (`CORRAL_AGENT_NETWORK_TAG`), with a warning; a list without
    it, or none known, is warned about."""
    service_account: GcpServiceAccount = GcpServiceAccount()
    """The agents' service account and scopes."""
    instance_type: Annotated[
        tuple[GcpInstanceType, ...], OneOrMany, Field(min_length=1), AfterValidator(unique)
    ] = (GcpInstanceType(gpu_type="nvidia-tesla-v100", gpu_num=4),)
    """Machine shapes the pool may launch, in order of preference (Determined's default:
    `n1-standard-32` with 4 V100s)."""
    operation_timeout_period: PositiveDuration = 300.0
    """How long to wait for a GCE operation."""
    spot: bool = False
    """Launch Spot VMs for every shape."""
    cpu_slots_allowed: bool = False  # a zero-GPU machine offers one CPU slot
    """A zero-GPU shape offers one CPU slot (for CPU-only trials)."""
    agent_settings: AgentSettings = AgentSettings()
    """Settings of the agents on this pool's instances (proxies, POSIX user, stop and interruption
    timing), delivered in the `startup-script` metadata (rows below; see Agent settings)."""

    @field_validator("boot_disk_source_image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not value.strip():
            raise field_error("must not be empty")
        return value

    @field_validator("boot_disk_type")
    @classmethod
    def _disk_type(cls, value: str | None) -> str | None:
        if value is None:
            return None
        name = value.rstrip("/").rsplit("/", 1)[-1]  # Determined keeps only the last part
        if not _DISK_TYPE.match(name):
            raise field_error(f"must be a GCE disk type such as pd-ssd, got {value!r}")
        return name

    @field_validator("label_value")
    @classmethod
    def _label_value(cls, value: str) -> str:
        if not value:
            raise field_error("must not be empty: it marks Corral's instances")
        return value

    @rule
    def _check_labels(self) -> RuleProblems:
        for key, value in self.labels.items():
            if not _LABEL_KEY.match(key):
                yield rule_error(f"labels.{key}", f"must be a GCP label key ({LABEL_RULE})")
            elif not _LABEL_VALUE.match(value):
                yield rule_error(f"labels.{key}", f"must be a GCP label value ({LABEL_RULE})")
            elif key == self.label_key:
                yield rule_error(f"labels.{key}", "is the ownership label (label_key)")

    # --- used by the pool and the domain
    @property
    def cloud(self) -> str:
        return "gcp"

    @property
    def ownership(self) -> Ownership:
        return Ownership(self.label_key, self.label_value)

    @property
    def disk_hourly_usd(self) -> float:
        """What an instance's boot disk (pd-balanced) costs an hour, running or stopped."""
        return self.boot_disk_size * PD_BALANCED_USD_PER_GB_MONTH / HOURS_PER_MONTH

    @property
    def is_spot(self) -> bool:
        return self.spot or any(t.preemptible for t in self.instance_type)

    @property
    def locations(self) -> tuple[str, ...]:
        return self.zone

    def instance_type_for(self, offering_name: str) -> GcpInstanceType:
        """The config entry behind an offering's ``instance_type`` (for the GCE adapter)."""
        for entry in self.instance_type:
            if entry.offering_name == offering_name:
                return entry
        raise KeyError(offering_name)

    @property
    def has_gpus(self) -> bool:
        """Some shape of the pool has GPUs (else its slots are CPU slots)."""
        return any(entry.gpus > 0 for entry in self.instance_type)

    def slots_for(self, entry: GcpInstanceType) -> int:
        """GPUs of one shape; a zero-GPU shape offers one CPU slot with ``cpu_slots_allowed``."""
        if entry.gpus == 0 and self.cpu_slots_allowed:
            return 1
        return entry.gpus

    def offerings(self) -> list[Offering]:
        found: list[Offering] = []
        for entry in self.instance_type:
            spot = self.spot or entry.preemptible
            for zone in self.zone:
                for cap in self.capacity_types(spot):
                    price = catalog.gcp_offering_price(
                        entry.machine_type,
                        entry.effective_gpu_type,
                        entry.gpus,
                        cap is CapacityType.SPOT,
                    )
                    slots = self.slots_for(entry)
                    found.append(Offering(entry.offering_name, zone, cap, slots, price or 0.0))
        return sorted(found, key=lambda o: 0 if o.is_spot else 1)
