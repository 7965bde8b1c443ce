"""``corral config ...``: check config files before they reach a cluster.

Output contract (tested): a valid file prints ``ok`` then one summary line per pool (or job)
on stdout and exits 0; warnings go to stderr as ``warning: ...``. An invalid file prints one
``path: reason`` line per problem on stderr and exits 2; a problem with the file as a whole
(missing, unreadable, YAML syntax) is printed as ``FILE: reason``.

A cluster config may leave out what the deployment knows (AWS region, GCP project, zone, agent
image, as a Determined master.yaml does): the values come from the options below or the
environment the deployment uses (``AWS_REGION``, ``GOOGLE_CLOUD_PROJECT``, ...), and a warning
says which value will be used and where it came from. The same goes for the agents' identity
(instance profile, service account, firewall tag): a pool that leaves one out with none known
gets a warning that its agents could not register.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.domain import catalog
from corral.domain.config import (
    ClusterConfig,
    CommandConfig,
    ConfigError,
    DeploymentDefaults,
    ExperimentConfig,
    GcpProvider,
    Problem,
    ResourcePool,
    cluster_config_from_mapping,
    defaults_from_env,
    expand_trials,
    format_duration,
    parse_yaml,
    read_source,
    reference,
    validate,
)
from corral.domain.text import visible

EXIT_INVALID = 2
EXIT_INTERNAL = 1

app = typer.Typer(help="Validate and inspect config files.", no_args_is_help=True)


class Kind(StrEnum):
    AUTO = "auto"
    CLUSTER = "cluster"
    EXPERIMENT = "experiment"
    COMMAND = "command"


def guess_kind(data: dict[str, Any]) -> Kind:
    """Cluster unless the file looks like a job: a searcher or hyperparameters make it an
    experiment, an entrypoint alone (or only job fields) a command."""
    if {"resource_pools", "provisioner", "provider"} & data.keys():
        return Kind.CLUSTER
    if {"searcher", "hyperparameters"} & data.keys():
        return Kind.EXPERIMENT
    if "entrypoint" in data:
        return Kind.EXPERIMENT
    if {"bind_mounts", "environment", "resources", "image"} & data.keys():
        return Kind.COMMAND
    return Kind.CLUSTER


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _slot_word(pool: ResourcePool, instance_type: str) -> str:
    """GPU, or "CPU slot" for a zero-GPU type that offers one (``cpu_slots_allowed``)."""
    provider = pool.provider
    if isinstance(provider, GcpProvider):
        gpus: int | None = provider.instance_type_for(instance_type).gpus
    else:
        gpus = catalog.gpus_for("aws", instance_type)
    return "CPU slot" if gpus == 0 and provider.cpu_slots_allowed else "GPU"


def pool_summary(pool: ResourcePool) -> str:
    """``pool default: aws p3.8xlarge x 4 GPUs, 0..5 instances, spot with on-demand fallback,
    idle 5m`` (``, consolidates`` when the pool moves trials to empty agents)."""
    types: dict[str, int] = {}
    for offering in pool.offerings():
        types.setdefault(offering.instance_type, offering.slots)
    shapes = ", ".join(
        f"{name} x {_plural(slots, _slot_word(pool, name))}" for name, slots in types.items()
    )
    if not pool.is_spot:
        capacity = "on-demand"
    elif pool.on_demand_fallback_after_s is None:
        capacity = "spot"  # on_demand_fallback: false, or on_demand_fallback_after: never
    elif pool.on_demand_fallback_after_s == 0:
        capacity = "spot with on-demand fallback"
    else:
        wait = format_duration(pool.on_demand_fallback_after_s)
        capacity = f"spot with on-demand fallback after {wait}"
    consolidating = ", consolidates" if pool.consolidate else ""
    return (
        f"pool {pool.name}: {pool.cloud} {shapes}, "
        f"{pool.min_instances}..{pool.max_instances} instances, {capacity}, "
        f"idle {format_duration(pool.max_idle_s)}{consolidating}"
    )


def cluster_lines(config: ClusterConfig) -> list[str]:
    return [pool_summary(p) for p in config.resource_pools]


def experiment_lines(config: ExperimentConfig) -> list[str]:
    trials = len(expand_trials(config))
    pool = config.resources.resource_pool or "the default pool"
    return [
        f"experiment {config.name}: {_plural(trials, 'trial')} ({config.searcher.name} "
        f"searcher), {_plural(config.resources.slots_per_trial, 'slot')} per trial, "
        f"priority {config.priority}, on {pool}"
    ]


def command_lines(config: CommandConfig) -> list[str]:
    image = config.trial_image() or "the pool's default image"
    return [
        f"command: {_plural(config.resources.slots_per_trial, 'slot')}, {image}, "
        f"{_plural(len(config.bind_mounts), 'bind mount')}"
    ]


def _check(
    file: Path, kind: Kind, defaults: DeploymentDefaults | None = None
) -> tuple[list[str], list[str]]:
    """(summary lines, warnings) for a valid file; raises ConfigError otherwise."""
    data = parse_yaml(read_source(file))
    if kind is Kind.AUTO:
        kind = guess_kind(data)
    if kind is Kind.CLUSTER:
        return _check_cluster(data, defaults)
    if kind is Kind.EXPERIMENT:
        return experiment_lines(validate(ExperimentConfig, data)), []
    return command_lines(validate(CommandConfig, data)), []


def _check_cluster(
    data: dict[str, Any], defaults: DeploymentDefaults | None
) -> tuple[list[str], list[str]]:
    """A cluster config and its ``simulation:`` block, every problem of both in one error.

    The block is checked here, with the simulator's own validator, and not by the config
    loader: the deployed functions load cluster configs on their cold start and must not
    import the simulator for a block they ignore."""
    from corral.sim.model import simulation_config

    problems: list[Problem] = []
    loaded = None
    try:
        loaded = cluster_config_from_mapping(data, defaults)
    except ConfigError as exc:
        problems.extend(exc.problems)
    block = loaded.config.simulation if loaded is not None else data.get("simulation")
    # A block that is not a mapping is the loader's to report (``simulation: ...``).
    if block is None or isinstance(block, Mapping):
        try:
            simulation_config(block, loaded.config if loaded is not None else None)
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems or loaded is None:
        raise ConfigError(problems)
    return cluster_lines(loaded.config), list(loaded.warnings)


@app.command("validate")
def validate_cmd(
    file: Annotated[Path, typer.Argument(help="The YAML file to check.")],
    kind: Annotated[
        Kind, typer.Option("--kind", "-k", help="What the file is; auto guesses from its keys.")
    ] = Kind.AUTO,
    region: Annotated[
        str | None, typer.Option(help="AWS region for pools without one (else AWS_REGION).")
    ] = None,
    image_id: Annotated[
        str | None,
        typer.Option(help="Agent AMI for AWS pools without one (else CORRAL_AGENT_IMAGE_ID)."),
    ] = None,
    project: Annotated[
        str | None,
        typer.Option(help="GCP project for pools without one (else GOOGLE_CLOUD_PROJECT)."),
    ] = None,
    zone: Annotated[
        str | None,
        typer.Option(
            help="GCE zone(s), comma-separated, for pools without one (else CORRAL_ZONE)."
        ),
    ] = None,
    source_image: Annotated[
        str | None,
        typer.Option(help="Agent image for GCP pools without one (else CORRAL_AGENT_IMAGE)."),
    ] = None,
    instance_profile: Annotated[
        str | None,
        typer.Option(
            help="Agent instance profile ARN for AWS pools without one "
            "(else CORRAL_AGENT_INSTANCE_PROFILE_ARN)."
        ),
    ] = None,
    metrics_namespace: Annotated[
        str | None,
        typer.Option(
            help="CloudWatch namespace of the agents' GPU metrics for AWS pools without one "
            "(else CORRAL_AGENT_METRICS_NAMESPACE)."
        ),
    ] = None,
    service_account: Annotated[
        str | None,
        typer.Option(
            help="Agent service account for GCP pools without one "
            "(else CORRAL_AGENT_SERVICE_ACCOUNT)."
        ),
    ] = None,
    network_tag: Annotated[
        str | None,
        typer.Option(
            help="The network tag the firewall rules target (else CORRAL_AGENT_NETWORK_TAG)."
        ),
    ] = None,
) -> None:
    """Check a cluster, experiment or command config: print ok, or every problem (exit 2)."""
    options = {
        "aws_region": region,
        "aws_image_id": image_id,
        "gcp_project": project,
        "gcp_zone": zone,
        "gcp_image": source_image,
        "aws_instance_profile": instance_profile,
        "aws_metrics_namespace": metrics_namespace,
        "gcp_service_account": service_account,
        "gcp_network_tag": network_tag,
    }
    try:
        lines, warnings = _check(file, kind, defaults_from_env(os.environ, options))
    except ConfigError as exc:
        for problem in exc.problems:
            # One line each: a key in the file (a path here) may hold control characters.
            typer.echo(visible(f"{problem.path or file}: {problem.reason}"), err=True)
        raise typer.Exit(EXIT_INVALID) from None
    except Exception as exc:  # a bug in Corral: still one line, never a traceback
        typer.echo(f"{file}: internal error: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(EXIT_INTERNAL) from None
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    typer.echo("ok")
    for line in lines:
        typer.echo(line)


@app.command("reference")
def reference_cmd(
    update: Annotated[
        Path | None,
        typer.Option(help="Rewrite the generated blocks of this file (docs/configuration.md)."),
    ] = None,
    check: Annotated[
        Path | None,
        typer.Option(help="Print a diff and exit 1 when this file's generated blocks are stale."),
    ] = None,
) -> None:
    """The configuration reference, generated from the config models: every field with its
    type, default, rule and meaning. Without options: print the generated blocks."""
    target = update or check
    if target is None:
        typer.echo(reference.blocks())
        return
    try:
        text = read_source(target)
    except ConfigError as exc:  # missing, a directory, not UTF-8: as `validate` says it
        for problem in exc.problems:
            typer.echo(f"{problem.path or target}: {problem.reason}", err=True)
        raise typer.Exit(EXIT_INVALID) from None
    try:
        diff = reference.stale_diff(text, str(target))
        if update is not None:
            if diff:
                target.write_text(reference.update_document(text, reference.render_all()))
            typer.echo(f"{target}: {'updated' if diff else 'already current'}")
            return
    except (OSError, reference.StaleMarkers) as exc:
        typer.echo(f"{target}: {exc}", err=True)
        raise typer.Exit(EXIT_INVALID) from None
    if diff:
        typer.echo(diff, nl=False)
        typer.echo(f"{target}: stale; refresh with: {reference.REFRESH_COMMAND}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{target}: current")
