"""Reading config files: YAML (or JSON) text or a path in, a validated model or ConfigError out.

Domain code stays free of I/O except here, where a path is read; services that receive a
config over HTTP use the ``*_from_mapping`` functions instead.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from corral.domain import text
from corral.domain.config.cluster import ClusterConfig
from corral.domain.config.deployment import DeploymentDefaults
from corral.domain.config.errors import (
    ConfigError,
    Problem,
    join_path,
    problems_from_validation_error,
)
from corral.domain.config.legacy import normalize_cluster, problems_at_original_paths

if TYPE_CHECKING:  # loaded on first use: the Lambda functions read only cluster configs
    from corral.domain.config.experiment import CommandConfig, ExperimentConfig

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A valid cluster config and the warnings about what was ignored or converted."""

    config: ClusterConfig
    warnings: tuple[str, ...] = ()


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys, which PyYAML would silently overwrite."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):
            continue  # construct_mapping reports unhashable keys itself
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=True))


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
)


def read_source(source: str | Path) -> str:
    """Text of a config given as a Path, a path string, or the YAML text itself.

    A ``str`` is a path when it is one line ending in .yaml, .yml or .json; anything else is
    the document. Read errors become a ConfigError with an empty path (the file as a whole).
    """
    if isinstance(source, str) and (
        "\n" in source or not source.strip().endswith((".yaml", ".yml", ".json"))
    ):
        return source
    path = Path(source)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError.single("", "no such file") from None
    except IsADirectoryError:
        raise ConfigError.single("", "is a directory, not a file") from None
    except UnicodeDecodeError:
        raise ConfigError.single("", "is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError.single("", f"cannot be read: {exc.strerror or exc}") from None


# No real config comes near these; a document past them is an accident or an attack. YAML
# aliases share one object, so a 700-byte "billion laughs" loads at once and only explodes
# when something walks it (validation, JSON encoding): the walk below counts every visit.
MAX_DEPTH = 64
MAX_VALUES = 100_000


def _check_shape(data: object) -> None:
    """Refuse a document nested deeper than MAX_DEPTH or holding more than MAX_VALUES values
    once its aliases are expanded, stopping at the first value past the limit."""
    seen = 0
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ConfigError.single(
                "", f"holds more than {MAX_VALUES:,} values once its YAML aliases are expanded"
            )
        if depth > MAX_DEPTH:
            raise ConfigError.single("", f"is nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def parse_yaml(text: str) -> dict[str, Any]:
    """The top-level mapping of a YAML document; syntax errors name the line and column."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no object tags
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown line"
        what = exc.problem or exc.context or "invalid YAML"
        raise ConfigError.single("", f"invalid YAML at {where}: {what}") from None
    except yaml.YAMLError as exc:
        raise ConfigError.single("", f"invalid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError.single("", f"is nested more than {MAX_DEPTH} levels deep") from None
    _check_shape(data)
    if data is None:
        raise ConfigError.single("", "is empty")
    if not isinstance(data, dict):
        raise ConfigError.single("", f"must be a mapping, not a {type(data).__name__}")
    return data


def _with_text_problems(problems: list[Problem], data: object) -> list[Problem]:
    """``problems`` and the text rule's floor (no NUL, no lone surrogate) anywhere in
    ``data``, where a field's own check has not reported it already (a constant
    hyperparameter, a description, a tag: every string ends up stored)."""
    extra = [Problem(join_path(*at), reason) for at, reason in text.problems_in(data)]
    if not extra:
        return problems
    # Pydantic's own word for a lone surrogate names neither the character nor the key.
    kept = [p for p in problems if p.reason != text.NOT_UNICODE]
    seen = {p.path for p in kept}
    return kept + [p for p in extra if p.path not in seen]


def validate(model: type[M], data: Mapping[str, Any]) -> M:
    """``model`` validated from ``data``, a user's submission, or ConfigError with
    user-spelled paths. The text rule (``corral.domain.text``) is checked on names and
    descriptions here, not when a stored config is read back."""
    problems: list[Problem] = []
    try:
        with text.submission():
            config = model.model_validate(data)
    except ValidationError as exc:
        problems = problems_from_validation_error(exc, data)
    problems = _with_text_problems(problems, data)
    if problems:
        raise ConfigError(problems)
    return config


def cluster_config_from_mapping(
    data: Mapping[str, Any], defaults: DeploymentDefaults | None = None
) -> LoadedConfig:
    """A cluster config from a parsed mapping; ConfigError lists every problem found at once
    (the Determined conversion's, field errors, and every rule that could be checked).
    ``defaults`` fill what the pools leave out and the deployment knows (region, project, ...);
    the caller reads them, so this stays free of I/O."""
    norm = normalize_cluster(data, defaults)
    problems: list[Problem] = []
    try:
        config = ClusterConfig.model_validate(norm.data)
    except ValidationError as exc:
        problems = problems_from_validation_error(exc, norm.data)
    problems = _with_text_problems(problems_at_original_paths(problems, norm), data)
    if problems:
        raise ConfigError(problems)
    return LoadedConfig(config, tuple(norm.warnings))


def load_cluster_config(
    source: str | Path, defaults: DeploymentDefaults | None = None
) -> LoadedConfig:
    """A cluster config (Corral's or a Determined/PEDL ``master.yaml``) with its warnings."""
    return cluster_config_from_mapping(parse_yaml(read_source(source)), defaults)


def load_experiment_config(source: str | Path) -> ExperimentConfig:
    from corral.domain.config.experiment import ExperimentConfig

    return validate(ExperimentConfig, parse_yaml(read_source(source)))


def load_command_config(source: str | Path) -> CommandConfig:
    from corral.domain.config.experiment import CommandConfig

    return validate(CommandConfig, parse_yaml(read_source(source)))
