"""What every cloud provider block has: agent settings, pool limits, timers and money.

Determined keeps these inside the provider block of a resource pool, so we do too; that way a
Determined ``master.yaml`` needs no restructuring. Cloud blocks (`aws.py`, `gcp.py`) extend
:class:`CommonProvider` and implement the few methods the pool needs to list its offerings.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Self, TypeVar, Union, get_args, get_origin

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PlainValidator,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

from corral.domain.config.durations import Duration, PositiveDuration, parse_duration
from corral.domain.config.errors import CUSTOM_ERROR_TYPE, field_error, rule_error
from corral.domain.config.task_defaults import TaskContainerDefaults
from corral.domain.fallback import ON_DEMAND_FALLBACK_AFTER_S
from corral.domain.offerings import CapacityType, Offering

# --- Collecting every problem of a model in one pass ------------------------------------------
#
# Pydantic runs a model's ``mode="after"`` validators only when all of its fields validated,
# and stops a model at the first error a validator raises. A config with a bad field and a
# broken cross-field rule would then report only the field; fixing it would reveal the rule,
# and so on. Instead, cross-field rules are ``@rule`` generator methods that yield every
# problem they find, and :class:`FrozenModel` runs them all, next to the field errors: on the
# model when its fields validated, or else on a :class:`Partial` stand-in whose failed fields
# cannot be read (a rule that reads one is skipped: it cannot be checked yet, and guessing
# from a default would invent problems).

RuleProblems = Iterator[PydanticCustomError]
R = TypeVar("R", bound=Callable[..., RuleProblems])
_RULE_MARK = "__corral_rule__"
_KNOWN_ERROR_TYPES = frozenset(get_args(ErrorType))


def rule(method: R) -> R:
    """Mark a model method as a cross-field rule: it yields ``rule_error(...)`` per problem."""
    setattr(method, _RULE_MARK, True)
    return method


class Unavailable(Exception):
    """A rule read a field that did not validate; the rule is skipped."""


class Partial:
    """A model whose fields did not all validate, as its rules see it.

    Reading a field that validated gives its validated value (a field the input leaves out, its
    default); reading one that failed raises :class:`Unavailable`. ``raw`` and ``failed_at``
    let a rule use what is still usable inside a failed field (the names of the valid pools).
    """

    def __init__(
        self, model: type[BaseModel], data: Mapping[str, Any], locs: list[tuple[str | int, ...]]
    ) -> None:
        self._model = model
        self._data = data
        self._aliases = _aliases(model)
        # Pydantic names a field by the key the input used; rules name it by the field.
        self._locs: list[tuple[str | int, ...]] = [
            (self._aliases.get(loc[0], loc[0]) if isinstance(loc[0], str) else loc[0], *loc[1:])
            for loc in locs
            if loc
        ]

    def raw(self, name: str) -> object:
        """The input value of field ``name`` (under any of its aliases), or None."""
        for key, field in self._aliases.items():
            if field == name and key in self._data:
                return self._data[key]
        return None

    def failed_at(self, *loc: str | int) -> bool:
        """True when a problem was found at ``loc`` (a field path) or inside it."""
        return any(found[: len(loc)] == loc for found in self._locs)

    def __getattr__(self, name: str) -> Any:
        fields = self._model.model_fields
        if name.startswith("_") or name not in fields:
            raise AttributeError(name)
        if self.failed_at(name):
            raise Unavailable(name)
        for key, field in self._aliases.items():
            if field == name and key in self._data:
                try:
                    return _adapter(self._model, name).validate_python(self._data[key])
                except ValidationError:
                    raise Unavailable(name) from None
        return fields[name].get_default(call_default_factory=True)


_ALIASES: dict[type[BaseModel], dict[str, str]] = {}
_ADAPTERS: dict[tuple[type[BaseModel], str], TypeAdapter[Any]] = {}
_RULES: dict[type[BaseModel], tuple[Callable[[Any], RuleProblems], ...]] = {}


def _aliases(model: type[BaseModel]) -> dict[str, str]:
    """Input key -> field name, for every spelling the model accepts."""
    if model not in _ALIASES:
        keys: dict[str, str] = {}
        for name, info in model.model_fields.items():
            keys[name] = name
            choices = getattr(info.validation_alias, "choices", None)
            for choice in choices or ():
                if isinstance(choice, str):
                    keys[choice] = name
            if isinstance(info.validation_alias, str):
                keys[info.validation_alias] = name
        _ALIASES[model] = keys
    return _ALIASES[model]


def _adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    key = (model, name)
    if key not in _ADAPTERS:
        info = model.model_fields[name]
        metadata: list[Any] = list(info.metadata)
        if info.discriminator is not None:
            metadata.append(Field(discriminator=info.discriminator))
        # Decorator field validators are not included: ours only check, they never convert.
        kind: Any = Annotated[info.annotation, *metadata] if metadata else info.annotation
        _ADAPTERS[key] = TypeAdapter(kind)
    return _ADAPTERS[key]


def _rules(model: type[BaseModel]) -> tuple[Callable[[Any], RuleProblems], ...]:
    if model not in _RULES:
        found: list[Callable[[Any], RuleProblems]] = []
        seen: set[str] = set()
        for klass in reversed(model.__mro__):  # base rules first, in definition order
            for name, value in vars(klass).items():
                if getattr(value, _RULE_MARK, False) and name not in seen:
                    seen.add(name)
                    found.append(getattr(model, name))
        _RULES[model] = tuple(found)
    return _RULES[model]


def _run_rules(model: type[BaseModel], subject: object) -> list[PydanticCustomError]:
    problems: list[PydanticCustomError] = []
    for check in _rules(model):
        found: list[PydanticCustomError] = []
        try:
            found.extend(check(subject))
        except Unavailable:
            continue  # the rule reads a field that is wrong already
        problems.extend(found)
    return problems


def _detail(err: Mapping[str, Any]) -> InitErrorDetails:
    """An error pydantic reported, in the form that builds a ValidationError again."""
    kind = str(err["type"])
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    error: str | PydanticCustomError
    if kind in _KNOWN_ERROR_TYPES:
        error = kind
    elif kind == CUSTOM_ERROR_TYPE:
        error = PydanticCustomError(kind, "{reason}", ctx)
    else:
        error = PydanticCustomError(kind, str(err["msg"]).replace("{", "{{").replace("}", "}}"))
    detail: InitErrorDetails = {"type": error, "loc": tuple(err["loc"]), "input": err["input"]}
    if kind in _KNOWN_ERROR_TYPES and ctx:
        detail["ctx"] = ctx
    return detail


class FrozenModel(BaseModel):
    """Base of every config model: immutable, unknown keys are errors (typos get caught), and
    a number must be finite (YAML's ``.inf`` and ``.nan`` are floats to pydantic, and a
    budget of infinity came back from the API as ``Infinity``, which is not JSON).

    Reports field errors and the problems of every ``@rule`` together (see above).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @classmethod
    def _prepare(cls, data: Any) -> tuple[Any, list[PydanticCustomError]]:
        """Rewrite other spellings of the input before field validation; conflicts found are
        returned and reported with the field errors, rather than stopping validation."""
        return data, []

    @model_validator(mode="wrap")
    @classmethod
    def _collect_problems(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        data, early = cls._prepare(data)
        data = _same_kind_scalars(cls, data)
        try:
            model = handler(data)
        except ValidationError as exc:
            errors = exc.errors()
            late: list[PydanticCustomError] = []
            if isinstance(data, Mapping) and all(err["loc"] for err in errors):
                locs = [tuple(err["loc"]) for err in errors]
                late = _run_rules(cls, Partial(cls, data, locs))
            raise cls._problems(data, early, [_detail(e) for e in errors], late) from None
        late = _run_rules(cls, model)
        if early or late:
            raise cls._problems(data, early, [], late)
        return model

    @classmethod
    def _problems(
        cls,
        data: Any,
        early: list[PydanticCustomError],
        fields: list[InitErrorDetails],
        late: list[PydanticCustomError],
    ) -> ValidationError:
        def own(error: PydanticCustomError) -> InitErrorDetails:
            return {"type": error, "loc": (), "input": data}

        details = [own(e) for e in early] + fields + [own(e) for e in late]
        return ValidationError.from_exception_data(cls.__name__, details)


_SCALARS = (bool, int, float)


class _WrongKind:
    """Stands in for a scalar of the wrong kind, so pydantic reports it at its field, in
    field order, with its own type error ("must be an integer", "must be true or false")."""


def _same_kind_scalars(model: type[BaseModel], data: Any) -> Any:
    """No coercion between YAML's scalar kinds: pydantic's lax mode read
    ``max_instances: true`` as 1, ``spot: 'yes'`` as true and ``root_volume_size: '200'`` as
    200. (Strict mode would also refuse enum values and Decimal strings, which YAML can only
    give as text.) An integer is still a number."""
    if not isinstance(data, Mapping):
        return data
    wrong: dict[str, _WrongKind] = {}
    for name, info in model.model_fields.items():
        keys = [name, info.alias, info.validation_alias]
        if isinstance(info.validation_alias, AliasChoices):
            keys += info.validation_alias.choices
        for key in {k for k in keys if isinstance(k, str) and k in data}:
            value, kind = data[key], _scalar_kind(model, name)
            if (
                (kind is int and isinstance(value, bool | str))
                or (kind is float and (isinstance(value, bool) or _not_a_number(value)))
                or (kind is bool and not isinstance(value, bool))
            ):
                wrong[key] = _WrongKind()
    return {**data, **wrong} if wrong else data


def _not_a_number(value: object) -> bool:
    """A string that is not a number's spelling. PyYAML reads YAML 1.1, where ``1e4`` and
    ``5e-3`` (no dot) are strings, so a float field takes the text of a number."""
    if not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return True
    return False


@functools.cache  # every validation asks, on every cold start; the answer never changes
def _scalar_kind(model: type[BaseModel], field: str | None) -> type | None:
    """``bool``, ``int`` or ``float`` if the field holds exactly that (optionally, or with
    constraints), else None: unions of several kinds, fields with a validator of their own
    that reads text (a duration such as ``30s``), and every other type are left alone."""
    found = model.model_fields.get(field or "")
    if found is None or any(_converts(m) for m in found.metadata):
        return None
    kind: Any = found.annotation
    while True:
        origin = get_origin(kind)
        if origin is Annotated:
            kind, *metadata = get_args(kind)
            if any(_converts(m) for m in metadata):
                return None
        elif origin in (Union, types.UnionType):
            rest = [a for a in get_args(kind) if a is not type(None)]
            if len(rest) != 1:
                return None
            kind = rest[0]
        else:
            break
    return kind if kind in _SCALARS else None


def _converts(metadata: object) -> bool:
    return isinstance(metadata, BeforeValidator | PlainValidator | WrapValidator)


@dataclass(frozen=True, slots=True)
class Ownership:
    """The tag (AWS) or label (GCP) pair that marks instances Corral may manage."""

    key: str
    value: str


def _one_or_many(value: object) -> object:
    """Accept a single item where a list is expected (``zone: us-central1-a``)."""
    if value is None:
        return ()
    if isinstance(value, str | dict):
        return (value,)
    return value


OneOrMany = BeforeValidator(_one_or_many)


def non_empty_str(value: object) -> object:
    if isinstance(value, str) and not value.strip():
        raise field_error("must not be empty")
    return value


NonEmptyStr = Annotated[str, BeforeValidator(non_empty_str)]
StrList = Annotated[tuple[NonEmptyStr, ...], OneOrMany]


def unique(value: tuple[Any, ...]) -> tuple[Any, ...]:
    """An after-validator for lists whose items must not repeat."""
    seen: list[Any] = []
    for item in value:
        if item in seen:
            raise field_error(f"{item!r} is listed twice")
        seen.append(item)
    return value


def _fallback_delay(value: object) -> float | None:
    """``never`` (no fallback at all), else a duration (``0``: fall back at once)."""
    if isinstance(value, str) and value.strip().lower() == "never":
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise field_error(f"{exc}, or never") from exc


FallbackDelay = Annotated[float | None, BeforeValidator(_fallback_delay)]


# How long a warm pool keeps a stopped instance by default: over a weekend (a Friday
# evening's last run, Monday morning's first), not for ever (its disks cost, its image ages).
MAX_STOPPED_PERIOD_S = 72 * 3600.0
# Disk prices for what a stopped instance costs (us-east-1 / us-central1, list prices as of
# 2026-11): EBS gp3 and Compute Engine pd-balanced, per GB-month of 730 hours.
GP3_USD_PER_GB_MONTH = 0.08
PD_BALANCED_USD_PER_GB_MONTH = 0.10
HOURS_PER_MONTH = 730.0


class WarmPool(FrozenModel):
    """Stopped instances a pool keeps to start again instead of launching new ones."""

    size: int = Field(default=0, ge=0)
    """How many idle agents are stopped (EC2 StopInstances, Compute Engine instances.stop) instead
    of terminated, disks kept. A trial that needs a new instance starts one of them again (tens of
    seconds: no provisioning, the agent and the trial images are on the disk) instead of launching
    one (minutes). A stopped instance costs its disks only (about 0.02 USD an hour for a 200 GB
    gp3 or pd-balanced disk) and does not count against `max_instances`. On AWS a spot pool with a
    warm pool launches spot instances from persistent requests that stop on interruption (EC2
    cannot stop one-time spot instances); Corral cancels the request before it terminates one.
    On-demand fallback agents of a spot pool are never kept. The agent starts again at every boot;
    on AWS `startup_script` runs at the first boot only (user data), on GCP at every boot. `0`: idle
    agents are terminated."""
    max_stopped_period: Duration = MAX_STOPPED_PERIOD_S
    """A stopped instance not started again within this period is terminated."""


class CommonProvider(FrozenModel):
    """Fields shared by the AWS and GCP provider blocks (Determined's names and defaults)."""

    # --- the agent on each instance
    master_url: str | None = None
    """URL agents use to reach the control plane (`http://` or `https://`); none: the deployment's
    API URL. Determined's instance-metadata hosts (`local-ipv4`, ...) mean the same and are dropped
    with a warning."""
    startup_script: str | None = None
    """Shell script run on the instance at boot, before the agent starts."""
    container_startup_script: str | None = None
    """Shell script the agent runs on the instance once per boot, before it pulls any image (e.g.
    a registry credential helper, as in the seeds' GCR recipe); a failure is unhealthy."""
    agent_docker_network: str = "corral"
    """Docker network task containers join (gang trials across instances use host networking)."""
    agent_docker_image: str | None = None
    """Accepted for Determined compatibility and not used (a warning says so): Corral's agent runs
    from the machine image, or from the wheel the bootstrap installs."""
    agent_docker_runtime: str = "runc"
    """Docker runtime of task containers (e.g. `nvidia`)."""
    agent_reconnect_attempts: int = Field(default=5, ge=0)
    """Times an agent retries reaching the control plane before giving up on a request."""
    agent_reconnect_backoff: Duration = 5.0
    """Wait between those retries."""
    # --- pool size and timers
    max_idle_agent_period: Duration = 1200.0
    """An agent idle this long is drained and terminated, never below `min_instances`."""
    max_agent_starting_period: PositiveDuration = 1200.0
    """An instance whose agent has not registered by then is terminated."""
    min_instances: int = Field(default=0, ge=0)
    """Instances kept even when idle."""
    max_instances: int = Field(default=5, ge=0)
    """Upper bound on the pool's instances (open spot requests count); must be >=
    `min_instances`."""
    launch_error_retries: int = Field(default=3, ge=0)
    """Retries of one launch that failed for no known reason (a cloud internal error, a launch
    request that never got an answer), each as a new attempt; then its record fails
    (`ALLOCATION_FAILED`) with the reason. Capacity and price refusals do not count (they move to
    the next offering), nor do throttling (the same attempt again), quota and permission errors (the
    pool backs off, 30 s doubling to 30 min) or an invalid launch config (the record fails at once
    and the pool waits 30 min). Instances that never register are counted by the pool's boot breaker
    instead (5 in a row stop launches; see docs/operations.md)."""
    # --- Corral additions
    on_demand_fallback: bool = True
    """Spot pools may launch on-demand when every spot offering is refused, once the trial has
    waited `on_demand_fallback_after`; `false` never falls back. Ignored by on-demand pools. A spot
    pool of a Determined master.yaml that sets neither field gets `false`, as Determined never falls
    back."""
    # How long a trial waits for spot before on-demand is bought for it; None: never.
    on_demand_fallback_after: FallbackDelay = ON_DEMAND_FALLBACK_AFTER_S
    """How long a trial of a spot pool waits for spot before on-demand is bought for it, counted
    from its submission (or its preemption or requeue); its pending reason says when. `0` falls back
    at the first refusal; `never` is the same as `on_demand_fallback: false`. Capacity for
    `min_instances` (no trial waiting) falls back only when it is `0`."""
    monthly_budget_usd: float | None = Field(default=None, gt=0)
    """Spend cap of the pool per calendar month in USD, boot disks included (a warm pool's stopped
    instances too); no launch that would exceed it (trials wait, with the budget as their
    pending reason). A warm pool keeps no stopped instance the rest of the month's budget could
    not start again (it is terminated). None: no cap."""
    capacity_memory_period: Duration = 180.0
    """How long an offering the cloud refused for capacity is skipped (Karpenter uses 3 minutes)."""
    # An idle on-demand agent of a spot pool (fallback capacity, ~3x the spot price) is
    # drained once idle as long as it took to boot, not after max_idle_agent_period.
    reap_fallback_early: bool = True
    """An idle on-demand agent of a spot pool (capacity the pool fell back to, about three times the
    spot price) is drained once it has been idle as long as it took to boot, never later than
    `max_idle_agent_period`. `false`: every idle agent lives `max_idle_agent_period`, as in
    Determined."""
    consolidate: bool = False
    """Move trials off an under-used agent onto free GPUs of the pool's other busy agents, so the
    emptied agent is terminated: only when nothing of the pool waits, only trials that run on one
    agent, have reported a checkpoint and have run there for 10 minutes, and only when half an
    agent's GPUs stay free for the next arrivals. A moved trial is stopped as for a spot notice
    (SIGTERM: checkpoint and exit) and resumes from that checkpoint; a trial that ignores SIGTERM
    loses the work since its last checkpoint. On-demand fallback agents are emptied first, also
    onto idle spot agents. See docs/architecture.md."""
    move_fallback_to_spot: bool = True
    """Move the trials of on-demand fallback agents to spot: onto free spot GPUs when some are
    free, else, once spot is back (a spot instance of the pool launched after the fallback agent
    was bought), requeued for the spot capacity the planner buys (on-demand again only after
    `on_demand_fallback_after`). Only when nothing of the pool waits, and only trials that run on
    one agent, have reported a checkpoint and have run there for 10 minutes; a moved trial is
    stopped as for a spot notice and resumes from its checkpoint. Applies without `consolidate`;
    `false` keeps fallback agents until their trials end (idle, they still go first)."""
    warm_pool: WarmPool = WarmPool()
    """Keep idle agents stopped instead of terminated, to start again in seconds (see below)."""
    # The pool's effective task_container_defaults (cluster block, then the pool's), set by
    # ClusterConfig: the adapters hand the agent bootstrap only the provider block.
    _task_defaults: TaskContainerDefaults = PrivateAttr(default_factory=TaskContainerDefaults)

    @property
    def task_defaults(self) -> TaskContainerDefaults:
        return self._task_defaults

    def with_task_defaults(self, defaults: TaskContainerDefaults) -> Self:
        """A copy carrying ``defaults`` (a copy: a provider may be shared by configs)."""
        copy = self.model_copy()
        copy._task_defaults = defaults
        return copy

    @rule
    def _max_over_min(self) -> RuleProblems:
        if self.max_instances < self.min_instances:
            yield rule_error("max_instances", "must be >= min_instances")

    @field_validator("master_url")
    @classmethod
    def _master_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise field_error("must start with http:// or https://")
        return value

    # --- what a cloud block provides to the pool
    @property
    def cloud(self) -> str:
        raise NotImplementedError

    @property
    def ownership(self) -> Ownership:
        raise NotImplementedError

    @property
    def is_spot(self) -> bool:
        """True when the pool launches spot (GCP: Spot/preemptible) capacity at all."""
        raise NotImplementedError

    def offerings(self) -> list[Offering]:
        raise NotImplementedError

    def capacity_types(self, spot: bool) -> tuple[CapacityType, ...]:
        """Capacity types to offer, best first: spot, then on-demand if allowed to fall back."""
        if not spot:
            return (CapacityType.ON_DEMAND,)
        if self.on_demand_fallback_after_s is not None:
            return (CapacityType.SPOT, CapacityType.ON_DEMAND)
        return (CapacityType.SPOT,)

    @property
    def on_demand_fallback_after_s(self) -> float | None:
        """Seconds a trial of a spot pool waits for spot before on-demand is bought for it;
        None when the pool never falls back (``on_demand_fallback: false`` wins over any
        ``on_demand_fallback_after``, and ``on_demand_fallback_after: never`` is the same)."""
        return self.on_demand_fallback_after if self.on_demand_fallback else None
