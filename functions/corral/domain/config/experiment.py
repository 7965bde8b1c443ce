"""Experiment and command configs: what a user submits.

Priority follows Determined: a LOWER number runs FIRST, 1..99, default 42.
"""

from __future__ import annotations

import datetime
import json
import math
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator
from pydantic_core import PydanticCustomError

from corral.domain import text
from corral.domain.config.common import FrozenModel, NonEmptyStr, RuleProblems, rule
from corral.domain.config.errors import ConfigError, Problem, field_error, rule_error
from corral.domain.config.hyperparameters import (
    MAX_TRIALS,
    Hyperparameter,
    SearcherConfig,
    expand,
    grid_points,
    grid_size,
)
from corral.domain.config.task_defaults import Image, RegistryAuth, image_for

DEFAULT_PRIORITY = 42

# What a trial is started with (its argv, environment, image, mount paths) goes to execve or
# to `docker run`, where a string ends at a NUL byte: the agent refuses such a trial at start
# (exit 125, no logs), so it is refused here, naming the field. The text rule's DATA kind
# (`corral.domain.text`), checked always: no stored config can hold a NUL (nor a lone
# surrogate, which no store could write).
NUL = text.NUL
NO_NUL = text.NO_NUL


def _data_problem(value: str) -> str | None:
    return text.problem(value, text.Kind.DATA)


NoNulStr = Annotated[str, text.checked(text.Kind.DATA, always=True)]


def _absolute(value: str) -> str:
    if (reason := _data_problem(value)) is not None:
        raise field_error(reason)
    if not posixpath.isabs(value):
        raise field_error(f"must be an absolute path, got {value!r}")
    return value


AbsPath = Annotated[str, AfterValidator(_absolute)]


def _entrypoint(value: object) -> object:
    """A string (run by a shell) or a non-empty list of strings (run as is)."""
    if isinstance(value, str):
        if not value.strip():
            raise field_error("must not be empty")
        if (reason := _data_problem(value)) is not None:
            raise field_error(reason)
        return value
    if isinstance(value, list | tuple):
        if not value or not all(isinstance(v, str) and v for v in value):
            raise field_error("must be a string or a non-empty list of non-empty strings")
        for i, arg in enumerate(value):
            if (reason := _data_problem(arg)) is not None:
                raise rule_error(f"[{i}]", reason)
        return tuple(value)
    raise field_error("must be a string or a list of strings")


Entrypoint = Annotated[str | tuple[str, ...], BeforeValidator(_entrypoint)]


# What can reach a process: execve refuses `=` and NUL in a name, and an empty one or one
# with spaces cannot be passed to `docker run --env`; `""`, `A=B` or `X Y` failed the trial at
# start (exit 125, no logs). Names Docker passes and some tools read (`a.b`, `a-b`) stay
# allowed, and a stored experiment that ran before keeps running (agents re-read its config).
ENV_NAME = re.compile(r"[^=\s\0]+\Z")
ENV_NAME_RULE = "must be non-empty, without =, spaces or NUL"
ENV_VALUE_RULE = "must be a string, a number or a boolean"


def _env_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name an environment variable (the name quoted), or None."""
    if not isinstance(name, str):
        # YAML reads `true: x` or `1: x` as a boolean or a number key.
        shown = json.dumps(name) if name is None or isinstance(name, bool | int | float) else name
        return f"name {shown} must be a string: quote it"
    if not ENV_NAME.match(name):
        return f"name {name!r} {ENV_NAME_RULE}"
    if text.submitted():  # the text rule for names (stored configs keep what they had)
        reason = text.problem(name, text.Kind.LINE, text.MAX_NAME_CHARS)
        if reason is not None:
            return f"name {name!r} {reason}"
    return None


def _env_value(value: object) -> tuple[str, str | None]:
    """(the value as the trial sees it, why it cannot be one or None).

    Strings are kept; numbers and booleans are written as JSON writes them (`1`, `0.5`,
    `true`), not Python's `True`; a YAML date as written (`2024-01-31`). Anything else
    (null, a list, a mapping) has no single spelling, so it is refused, not turned into a
    Python repr such as `None` or `[1]`.
    """
    if isinstance(value, str):
        return value, _data_problem(value)
    if isinstance(value, bool | int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return "", "must be a finite number"
        return json.dumps(value), None
    if type(value) is datetime.date:
        return value.isoformat(), None
    if value is None:
        return "", f'{ENV_VALUE_RULE}, not null (write "" for an empty value)'
    shown = f"a {type(value).__name__}"
    if isinstance(value, Mapping):
        shown = "a mapping"
    elif isinstance(value, list | tuple):
        shown = "a list"
    return "", f"{ENV_VALUE_RULE}, not {shown} (quote it to pass it as written)"


def _env_vars(value: object) -> tuple[object, list[PydanticCustomError]]:
    """A mapping of name to string, from a mapping or from Determined's list of ``KEY=VALUE``
    strings, and a problem for each wrong entry (left out of the mapping: reported once)."""
    field = "environment_variables"
    out: dict[str, str] = {}
    problems: list[PydanticCustomError] = []
    if isinstance(value, Mapping):
        for name, raw in value.items():
            name_problem = _env_name_problem(name)
            if name_problem is not None:
                # The name goes in the reason, not the path: `""` or `X Y` cannot be a path.
                problems.append(rule_error(field, name_problem))
                continue
            given, reason = _env_value(raw)
            if reason is not None:
                problems.append(rule_error(f"{field}.{name}", reason))
            else:
                out[name] = given
        return out, problems
    if isinstance(value, list):
        first: dict[str, int] = {}
        for i, item in enumerate(value):
            at = f"{field}[{i}]"
            if not isinstance(item, str) or "=" not in item or item.startswith("="):
                problems.append(rule_error(at, "must be KEY=VALUE"))
                continue
            name, _, given = item.partition("=")
            name_problem = _env_name_problem(name)
            if name_problem is not None:
                problems.append(rule_error(at, name_problem))
            elif (reason := _data_problem(given)) is not None:
                problems.append(rule_error(at, reason))
            elif name in first:
                # A mapping cannot say it twice; here the later value would silently win.
                problems.append(rule_error(at, f"sets {name} again (as [{first[name]}] does)"))
            else:
                first[name] = i
                out[name] = given
        return out, problems
    return value, []  # not a mapping nor a list: the field's own type error says so


class Resources(FrozenModel):
    slots_per_trial: int = Field(default=1, ge=0)
    """GPUs per trial; a trial larger than one instance is gang-placed on several."""
    resource_pool: text.Name | None = None  # None: the cluster's default pool
    """Pool to run in; none: the cluster's default pool."""
    priority: int = Field(default=DEFAULT_PRIORITY, ge=1, le=99)  # lower runs first
    """Scheduling priority, 1-99: lower runs first, as in Determined. A top-level `priority` is
    accepted too (both must agree)."""


class Environment(FrozenModel):
    environment_variables: dict[str, str] = Field(default_factory=dict)
    """Environment of each trial: a mapping, or a list of `KEY=VALUE` strings as Determined
    allows. A name is non-empty, without `=`, spaces or NUL (what a process can be given), nor
control characters, at most 256 characters. A value
    is a string; a number or a boolean is passed as JSON writes it (`1`, `0.5`, `true`: quote a
    value to keep its spelling, as YAML reads `yes` as true and `1.50` as 1.5); null, lists and
    mappings are refused. No NUL characters."""
    image: Image | None = None  # Determined's spelling of the top-level `image`
    """Determined's spelling of the top-level `image` (both must agree): a name, or `{cpu: ...,
    gpu: ...}`."""
    registry_auth: RegistryAuth | None = None
    """Credentials the agent pulls this experiment's image with (`username`, `password`,
    `serveraddress`), as in Determined; over the pool's `task_container_defaults.registry_auth`.
    Stored with the experiment; the API shows the password as `**********`."""

    @classmethod
    def _prepare(cls, data: Any) -> tuple[Any, list[PydanticCustomError]]:
        """Environment variables are checked entry by entry here, so that every wrong one is
        reported at its own path (a field validator stops at the first)."""
        if not isinstance(data, Mapping) or "environment_variables" not in data:
            return data, []
        variables, problems = _env_vars(data["environment_variables"])
        return {**data, "environment_variables": variables}, problems


class BindMount(FrozenModel):
    host_path: AbsPath
    """Absolute path on the agent's machine."""
    container_path: AbsPath
    """Absolute path inside the trial container."""
    read_only: bool = False
    """Mount read-only."""


class S3Storage(FrozenModel):
    type: Literal["s3"]
    """Checkpoints in an S3 bucket."""
    bucket: NonEmptyStr
    """Bucket name."""
    prefix: str = ""
    """Key prefix inside the bucket."""
    endpoint_url: str | None = None
    """S3-compatible endpoint (MinIO, ...), `http://` or `https://`: the trial's AWS SDK sends
    its S3 calls there (`AWS_ENDPOINT_URL_S3`, also `CORRAL_CHECKPOINT_ENDPOINT_URL`); none:
    AWS S3."""

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise field_error("must start with http:// or https://")
        return value


class GcsStorage(FrozenModel):
    type: Literal["gcs"]
    """Checkpoints in a Cloud Storage bucket."""
    bucket: NonEmptyStr
    """Bucket name."""
    prefix: str = ""
    """Object prefix inside the bucket."""


class SharedFsStorage(FrozenModel):
    type: Literal["shared_fs"]
    """Checkpoints on a file system every agent mounts."""
    host_path: AbsPath
    """Absolute path of the shared file system on the agents."""
    storage_path: str | None = None  # relative to host_path
    """Directory under `host_path`; none: `host_path` itself."""


CheckpointStorage = Annotated[S3Storage | GcsStorage | SharedFsStorage, Field(discriminator="type")]


# A config is stored with its experiment, and a store item has a size limit (DynamoDB:
# 400 KB, with the trial list beside it); no real config comes near these.
MAX_DESCRIPTION_CHARS = 10_000
MAX_CONFIG_BYTES = 64 * 1024


class _JobConfig(FrozenModel):
    """What experiments and commands share."""

    # Bounded so that a record always fits a store item (DynamoDB: 400 KB).
    description: text.Prose = Field(default="", max_length=MAX_DESCRIPTION_CHARS)
    """Free text, shown in listings: lines of text (tab and newline are the only control
    characters)."""
    # Resolved to one name at submission (submit.py): the stored config says what ran.
    image: Image | None = None
    """Container image of each trial (`environment.image` accepted): a name, or Determined's
    `{cpu: ..., gpu: ...}`, picked by whether the trial has GPUs (`slots_per_trial`). None: the
    pool's `task_container_defaults.image`, else Corral's default (see Default task image). Set at
    submission: the stored config names the image the trials run in. The process executor
    ignores it."""
    resources: Resources = Resources()
    """GPUs, pool and priority."""
    environment: Environment = Environment()
    """Environment variables (and Determined's `environment.image`)."""
    bind_mounts: tuple[BindMount, ...] = ()
    """Host directories mounted in each trial container."""

    @classmethod
    def _prepare(cls, data: Any) -> tuple[Any, list[PydanticCustomError]]:
        """Determined spells the image ``environment.image``, priority ``resources.priority``.

        Conflicting spellings are problems reported with the rest; validation goes on with the
        top-level ``image`` and with ``resources.priority``.
        """
        if not isinstance(data, Mapping):
            return data, []
        problems: list[PydanticCustomError] = []
        size = len(json.dumps(data, default=str))
        if size > MAX_CONFIG_BYTES:
            problems.append(
                rule_error("", f"is {size:,} bytes as JSON; the limit is {MAX_CONFIG_BYTES:,}")
            )
        data = dict(data)
        env = data.get("environment")
        if isinstance(env, Mapping) and isinstance(env.get("image"), str | Mapping):
            if data.get("image") not in (None, env["image"]):
                problems.append(rule_error("image", "differs from environment.image: set only one"))
            else:
                data["image"] = env["image"]
        if "priority" in data:
            priority = data.pop("priority")
            res = data.get("resources")
            if res is None:
                res = {}
            if not isinstance(res, Mapping):
                pass  # resources itself is reported
            elif "priority" in res and res["priority"] != priority:
                problems.append(
                    rule_error("priority", "differs from resources.priority: set only one")
                )
            else:
                data["resources"] = {**res, "priority": priority}
        return data, problems

    @property
    def priority(self) -> int:
        return self.resources.priority

    def trial_image(self, gpu_slots: bool = True) -> str | None:
        """The one image this job's trials run in, if it names one: a map's ``gpu`` entry when
        its trials have GPUs (slots, in a pool whose slots are GPUs: ``gpu_slots``), else its
        ``cpu`` entry."""
        return image_for(self.image, gpu_slots and self.resources.slots_per_trial > 0)


class ExperimentConfig(_JobConfig):
    name: text.Name = "experiment"
    """Display name: one line of at most 256 characters, without control characters (ESC,
    newlines, tabs) or bidirectional overrides."""
    entrypoint: Entrypoint
    """What each trial runs: a string runs through a shell, a list runs as is."""
    hyperparameters: Annotated[
        dict[str, Hyperparameter], text.checked_keys(text.Kind.LINE, text.MAX_NAME_CHARS)
    ] = Field(default_factory=dict)
    """Values given to each trial, by name: a plain value (or a mapping without `type`) is a
    constant; otherwise one of the kinds below."""
    searcher: SearcherConfig = SearcherConfig()
    """How trials are made from the hyperparameters."""
    max_restarts: int = Field(default=5, ge=0)  # user errors only; lost instances are free
    """Restarts of a trial after a user error (a non-zero exit); a lost or interrupted instance does
    not use them."""
    checkpoint_storage: CheckpointStorage | None = None  # None: the cluster's default
    """Where trials save checkpoints; none: the cluster's default place
    (`file:///tmp/corral-checkpoints`)."""

    @rule
    def _check_search(self) -> RuleProblems:
        if self.searcher.name != "grid":
            return
        missing = [name for name, hp in self.hyperparameters.items() if grid_points(hp) is None]
        for name in missing:
            yield rule_error(f"hyperparameters.{name}.count", "required for the grid searcher")
        size = grid_size(self.hyperparameters)
        if not missing and size > MAX_TRIALS:
            yield rule_error(
                "searcher", f"grid of {size:,} trials exceeds the limit of {MAX_TRIALS:,}"
            )


class CommandConfig(_JobConfig):
    """Determined's ``command.yaml``: a job with no search; the command line comes separately."""

    entrypoint: Entrypoint | None = None
    """The command, when `corral command run` is given none; the command line given replaces it."""


def expand_trials(config: ExperimentConfig) -> list[dict[str, Any]]:
    """Each trial's hyperparameters: one for ``single``, the product for ``grid``,
    ``max_trials`` seeded samples for ``random`` (repeatable: see ``SearcherConfig.seed``)."""
    return expand(config.searcher, config.hyperparameters)


def command_job(config: CommandConfig, argv: Sequence[str]) -> ExperimentConfig:
    """A command as a one-trial experiment: ``argv`` (or the config's entrypoint) runs once,
    with no hyperparameters and no restarts on a user error (a command is not retried)."""
    found = [
        (i, "must not be empty" if not arg else _data_problem(arg)) for i, arg in enumerate(argv)
    ]
    bad = [Problem(f"argv[{i}]", reason) for i, reason in found if reason is not None]
    if bad:  # a ConfigError (a 4xx naming argv[i]), before ExperimentConfig's own check
        raise ConfigError(bad)
    entrypoint: str | tuple[str, ...] | None = tuple(argv) if argv else config.entrypoint
    if not entrypoint:
        raise ConfigError.single("entrypoint", "required: give a command line")
    shown = " ".join(entrypoint) if isinstance(entrypoint, tuple) else entrypoint
    return ExperimentConfig(
        # A name is one line: the command line's newlines and escapes are shown, not kept.
        name=text.visible(f"command: {shown}")[:120],
        description=config.description,
        image=config.image,
        resources=config.resources,
        environment=config.environment,
        bind_mounts=config.bind_mounts,
        entrypoint=entrypoint,
        searcher=SearcherConfig(name="single"),
        max_restarts=0,
    )
