"""The AWS provider block of a resource pool (`type: aws`), with Determined's field names."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from corral.domain import catalog
from corral.domain.config.agent_settings import AwsAgentSettings
from corral.domain.config.common import (
    GP3_USD_PER_GB_MONTH,
    HOURS_PER_MONTH,
    CommonProvider,
    FrozenModel,
    NonEmptyStr,
    OneOrMany,
    Ownership,
    RuleProblems,
    StrList,
    rule,
    unique,
)
from corral.domain.config.errors import field_error, matching, rule_error
from corral.domain.offerings import CapacityType, Offering

# Field checks: the pattern each string must match, and what the error says it must be.
_REGION = matching(
    re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$"), "must be an AWS region such as us-east-1"
)
_AMI = matching(
    re.compile(r"^ami-[0-9a-f]{8,17}$"), "must be an AMI id such as ami-0123456789abcdef0"
)
_INSTANCE_PROFILE_ARN = matching(
    re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:instance-profile/[\w+=,.@/-]+$"),
    "must be an instance profile ARN such as "
    "arn:aws:iam::123456789012:instance-profile/corral-agent",
    echo=False,
)
_LOG_GROUP = matching(
    re.compile(r"^[\w./#-]{1,512}$"),  # CloudWatch Logs' rule for group names
    "must be a CloudWatch Logs group name (letters, digits, '_', '-', '/', '.', '#')",
    echo=False,
)
_LOG_STREAM = matching(
    re.compile(r"^[^:*]{1,512}$"),
    "must be a CloudWatch Logs stream name (no ':' or '*')",
    echo=False,
)


# Launches expose instance tags in the instance metadata (InstanceMetadataTags, so the agent
# learns its pool and record without ec2:DescribeTags); EC2 then refuses tag keys with other
# characters than these (no '/', no spaces) and the keys '.', '..' and '_index'.
_IMDS_TAG_KEY = re.compile(r"^[A-Za-z0-9+\-=.,_:@]+$")
_IMDS_TAG_KEY_RULE = (
    "EC2 allows only letters, digits and + - = . , _ : @ in the tag keys of instances whose "
    "tags are in the instance metadata, as Corral's launches are"
)


def _imds_tag_key(value: str) -> str:
    if not _IMDS_TAG_KEY.match(value) or value in (".", "..", "_index"):
        raise field_error(f"{value!r}: {_IMDS_TAG_KEY_RULE}")
    return value


def _prefixed(prefix: str, what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not value.startswith(prefix) or len(value) <= len(prefix):
            raise field_error(f"must be {what} ({prefix}...), got {value!r}")
        return value

    return AfterValidator(check)


class AwsNetworkInterface(FrozenModel):
    public_ip: bool = True
    """Give agents a public IP (needed when the subnet has no NAT gateway)."""
    # Several subnets (one per availability zone) let the planner move to another zone when
    # one runs out of capacity; each subnet is a separate offering location.
    subnet_id: Annotated[
        tuple[Annotated[str, _prefixed("subnet-", "a subnet id")], ...],
        OneOrMany,
        AfterValidator(unique),
    ] = ()
    """Subnets to launch in (`subnet-...`), one per availability zone; each is an offering location,
    so a zone out of capacity moves launches to the next. None: the region's default subnets, and
    the location is the region name."""
    security_group_id: Annotated[str, _prefixed("sg-", "a security group id")] | None = None
    """Security group of the agents (`sg-...`); `infra/network.yaml` creates one with the ports
    trials need between agents."""


class AwsTag(FrozenModel):
    key: NonEmptyStr = Field(max_length=128)
    """Tag key; not starting with `aws:`, not `Name` and not the ownership `tag_key` (Corral sets
    those)."""
    value: str = Field(default="", max_length=256)
    """Tag value."""

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if value.lower().startswith("aws:"):
            raise field_error("must not start with 'aws:'")
        if value == "Name":
            raise field_error(f"{value!r} is set by Corral (ownership tag or instance name)")
        return _imds_tag_key(value)


class AwsProvider(CommonProvider):
    type: Literal["aws"]
    """Selects the AWS provider block."""
    region: Annotated[str, _REGION]
    """AWS region instances launch in, e.g. `us-east-1`. Left out (as in Determined's master.yaml):
    the deployment's region, with a warning (see Deployment defaults)."""
    image_id: Annotated[str, _AMI]
    """Agent machine image, `ami-` followed by 8-17 hex digits (built by `infra/agent-image/`). Left
    out: the deployment's agent image (`CORRAL_AGENT_IMAGE_ID`)."""
    instance_type: Annotated[StrList, Field(min_length=1), AfterValidator(unique)] = (
        "g4dn.metal",  # Determined's default
    )
    """EC2 instance types the pool may launch, in order of preference (Determined's default is
    `g4dn.metal`)."""
    instance_slots: int | None = Field(default=None, ge=0)
    """GPUs of an instance type the catalog does not know; required when a type is not in the
    catalog. Known types always use the catalog's count."""
    root_volume_size: int = Field(default=200, ge=100)
    """Root EBS volume size in GB."""
    tag_key: NonEmptyStr = Field(default="managed-by", max_length=128)
    """Key of the ownership tag: Corral only ever touches instances and spot requests carrying
    `tag_key: tag_value`. Must not start with `aws:`."""
    tag_value: NonEmptyStr = Field(default="corral", max_length=256)
    """Value of the ownership tag; make the pair unique per installation."""
    instance_name: NonEmptyStr = Field(default="corral-agent", max_length=256)
    """`Name` tag of agent instances."""
    ssh_key_name: str | None = None
    """EC2 key pair for SSH to agents; none: no key."""
    iam_instance_profile_arn: Annotated[str, _INSTANCE_PROFILE_ARN] | None = None
    """Instance profile of the agents, `arn:aws:iam::<12 digits>:instance-profile/<name>` (the
    control plane needs `iam:PassRole` on its role). Their requests to the API are signed with its
    credentials: left out, the deployment's (the stack's `AgentInstanceProfileArn`,
    `CORRAL_AGENT_INSTANCE_PROFILE_ARN`) with a warning; with none known, a warning that the
    agents cannot register."""
    network_interface: AwsNetworkInterface = AwsNetworkInterface()
    """Network settings of the agents' network interface."""
    spot: bool = False
    """Launch spot instances (one-time requests, interruption behaviour `terminate`); see
    `on_demand_fallback` for what happens when spot is refused."""
    spot_max_price: Decimal | None = Field(default=None, gt=0)
    """Highest spot price per hour in USD (a string or a number); only with `spot: true`. None (or
    `""`, as Determined's renders write it): up to the on-demand price."""
    custom_tags: tuple[AwsTag, ...] = ()
    """Extra tags on instances, as `{key, value}` items. Instance tags are readable in the instance
    metadata, so EC2 allows only letters, digits and `+ - = . , _ : @` in their keys (no `/`, no
    spaces)."""
    cpu_slots_allowed: bool = False
    """A zero-GPU instance offers one CPU slot (for CPU-only trials)."""
    # CloudWatch Logs group the agents copy trial logs to (their role must be allowed to write
    # there), and the stream name Determined used for all agents (passed on to the agent).
    log_group: Annotated[str, _LOG_GROUP] | None = None
    """CloudWatch Logs group the agents copy trial logs to, one stream per instance and trial
    (`<instance-id>/<trial-id>`, after `log_stream` and a `/` when that is set). The agents' role
    must be allowed to write there: the stack's agent role may write only to its
    `AgentLogGroupName`."""
    log_stream: Annotated[str, _LOG_STREAM] | None = None
    """Determined's one stream for all agents (no `:` or `*`); passed to the agent config as
    `cloudwatch_log_stream`, the prefix of the agents' stream names (one stream per instance and
    trial), with a warning saying so."""
    agent_settings: AwsAgentSettings = AwsAgentSettings()
    """Settings of the agents on this pool's instances (proxies, POSIX user, stop and interruption
    timing, rebalance recommendations, GPU metrics), delivered in the user data (rows below; see
    Agent settings)."""

    @field_validator("tag_key")
    @classmethod
    def _tag_key(cls, value: str) -> str:
        if value.lower().startswith("aws:"):
            raise field_error("must not start with 'aws:' (reserved by AWS)")
        return _imds_tag_key(value)

    @rule
    def _spot_price_needs_spot(self) -> RuleProblems:
        if self.spot_max_price is not None and not self.spot:
            yield rule_error("spot_max_price", "only allowed with spot: true")

    @rule
    def _slots_for_unknown_types(self) -> RuleProblems:
        unknown = [t for t in self.instance_type if catalog.lookup_aws(t) is None]
        if unknown and self.instance_slots is None:
            yield rule_error(
                "instance_slots",
                f"required because instance type {unknown[0]!r} is not in the catalog "
                "(set the number of GPUs it has)",
            )

    @rule
    def _custom_tag_keys(self) -> RuleProblems:
        for i, tag in enumerate(self.custom_tags):
            if tag.key == self.tag_key:
                yield rule_error(
                    f"custom_tags[{i}].key",
                    f"{tag.key!r} is set by Corral (ownership tag or instance name)",
                )

    # --- used by the pool and the domain
    @property
    def cloud(self) -> str:
        return "aws"

    @property
    def ownership(self) -> Ownership:
        return Ownership(self.tag_key, self.tag_value)

    @property
    def disk_hourly_usd(self) -> float:
        """What an instance's root volume (gp3) costs an hour, running or stopped."""
        return self.root_volume_size * GP3_USD_PER_GB_MONTH / HOURS_PER_MONTH

    @property
    def is_spot(self) -> bool:
        return self.spot

    @property
    def locations(self) -> tuple[str, ...]:
        """Subnet ids, or the region itself when the pool uses the default VPC subnets."""
        return self.network_interface.subnet_id or (self.region,)

    def slots_for(self, instance_type: str) -> int:
        """Slots (GPUs) one instance offers; the catalog wins over ``instance_slots``.

        ``instance_slots`` only describes types the catalog does not know: with several types
        in one pool, a single override cannot be right for all of them. A zero-GPU instance
        offers one CPU slot when ``cpu_slots_allowed`` is set.
        """
        gpus = self._gpus(instance_type)
        if gpus == 0 and self.cpu_slots_allowed:
            return 1
        return gpus

    def _gpus(self, instance_type: str) -> int:
        entry = catalog.lookup_aws(instance_type)
        return entry.gpus if entry is not None else (self.instance_slots or 0)

    @property
    def has_gpus(self) -> bool:
        """Some instance type of the pool has GPUs (else its slots are CPU slots)."""
        return any(self._gpus(t) > 0 for t in self.instance_type)

    def hourly_price(self, instance_type: str, capacity: CapacityType) -> float:
        entry = catalog.lookup_aws(instance_type)
        if entry is None:
            return 0.0
        if capacity is CapacityType.SPOT:
            return entry.spot_usd_per_hour
        return entry.on_demand_usd_per_hour

    def offerings(self) -> list[Offering]:
        found = [
            Offering(t, loc, cap, self.slots_for(t), self.hourly_price(t, cap))
            for t in self.instance_type
            for loc in self.locations
            for cap in self.capacity_types(self.spot)
        ]
        # Preference order: all spot offerings first, then on-demand; each in config order.
        return sorted(found, key=lambda o: 0 if o.is_spot else 1)
