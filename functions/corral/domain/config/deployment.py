"""Values a pool may leave out because the deployment knows them: region, project, zone, image.

Determined's master reads a missing ``region``, ``project`` or ``zone`` from the instance
metadata of the machine it runs on. Corral has no master machine, but a deployment knows its own
region and project (the function's environment) and may name a zone and an agent image. The
caller reads them (``defaults_from_env`` takes the environment as a plain mapping, so this module
stays free of I/O) and the loader fills them into the pools that leave them out, with a warning
naming the value and where it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeploymentValue:
    value: str
    source: str  # where it came from, for the warning: "AWS_REGION", "--region", ...


@dataclass(frozen=True, slots=True)
class DeploymentDefaults:
    aws_region: DeploymentValue | None = None
    aws_image_id: DeploymentValue | None = None
    gcp_project: DeploymentValue | None = None
    gcp_zone: DeploymentValue | None = None  # one zone, or several separated by commas
    gcp_image: DeploymentValue | None = None
    # The agents' identity and reach (agent_identity.py): what the stack or deploy.sh made.
    aws_instance_profile: DeploymentValue | None = None
    aws_metrics_namespace: DeploymentValue | None = None
    gcp_service_account: DeploymentValue | None = None
    gcp_network_tag: DeploymentValue | None = None


# Environment variables, first found wins. Lambda sets AWS_REGION; deploy.sh sets
# GOOGLE_CLOUD_PROJECT; the CORRAL_* ones are the deployment's own settings.
ENV_NAMES: Mapping[str, tuple[str, ...]] = {
    "aws_region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "aws_image_id": ("CORRAL_AGENT_IMAGE_ID",),
    "gcp_project": ("CORRAL_PROJECT", "GOOGLE_CLOUD_PROJECT"),
    "gcp_zone": ("CORRAL_ZONE",),
    "gcp_image": ("CORRAL_AGENT_IMAGE",),
    "aws_instance_profile": ("CORRAL_AGENT_INSTANCE_PROFILE_ARN",),
    "aws_metrics_namespace": ("CORRAL_AGENT_METRICS_NAMESPACE",),
    "gcp_service_account": ("CORRAL_AGENT_SERVICE_ACCOUNT",),
    "gcp_network_tag": ("CORRAL_AGENT_NETWORK_TAG",),
}
# The command line options of `corral config validate` that override them.
OPTION_NAMES: Mapping[str, str] = {
    "aws_region": "--region",
    "aws_image_id": "--image-id",
    "gcp_project": "--project",
    "gcp_zone": "--zone",
    "gcp_image": "--source-image",
    "aws_instance_profile": "--instance-profile",
    "aws_metrics_namespace": "--metrics-namespace",
    "gcp_service_account": "--service-account",
    "gcp_network_tag": "--network-tag",
}


def defaults_from_env(
    env: Mapping[str, str], overrides: Mapping[str, str | None] | None = None
) -> DeploymentDefaults:
    """The deployment's defaults from ``env``; ``overrides`` (field -> value, from the command
    line options in ``OPTION_NAMES``) win over it."""
    found: dict[str, DeploymentValue | None] = {}
    for name, variables in ENV_NAMES.items():
        given = (overrides or {}).get(name)
        if given and given.strip():
            found[name] = DeploymentValue(given.strip(), OPTION_NAMES[name])
            continue
        found[name] = next(
            (DeploymentValue(env[v].strip(), v) for v in variables if env.get(v, "").strip()),
            None,
        )
    return DeploymentDefaults(**found)


@dataclass(frozen=True, slots=True)
class _Field:
    key: str  # the provider field
    default: str  # the DeploymentDefaults attribute
    what: str  # for the warning: "the deployment's region"
    missing: str  # why it is required when no default is known


_FIELDS: Mapping[str, tuple[_Field, ...]] = {
    "aws": (
        _Field(
            "region",
            "aws_region",
            "the deployment's region",
            "Determined reads it from the master's instance metadata; Corral uses the "
            "deployment's region (AWS_REGION), and none is known here",
        ),
        _Field(
            "image_id",
            "aws_image_id",
            "the deployment's agent image",
            "Determined's default AMIs carry Determined's agent, not Corral's; set an AMI with "
            "Corral's agent here, or CORRAL_AGENT_IMAGE_ID for the deployment",
        ),
    ),
    "gcp": (
        _Field(
            "project",
            "gcp_project",
            "the deployment's project",
            "Determined reads it from the master's instance metadata; Corral uses the "
            "deployment's project (GOOGLE_CLOUD_PROJECT), and none is known here",
        ),
        _Field(
            "zone",
            "gcp_zone",
            "the deployment's zone",
            "Determined uses the master's zone; set the zones here, or CORRAL_ZONE for the "
            "deployment",
        ),
        _Field(
            "boot_disk_source_image",
            "gcp_image",
            "the deployment's agent image",
            "Determined's default image carries Determined's agent, not Corral's; set an "
            "image with Corral's agent here, or CORRAL_AGENT_IMAGE for the deployment",
        ),
    ),
}


@dataclass
class Filled:
    """What ``fill_defaults`` did: warnings for values it filled in, and the reason to give
    instead of a bare "required" for each field it could not fill (by field name)."""

    warnings: list[str]
    missing: dict[str, str]


def fill_defaults(provider: dict[str, object], path: str, defaults: DeploymentDefaults) -> Filled:
    """Fill the fields of ``provider`` (a mutable provider mapping) the deployment knows."""
    done = Filled([], {})
    for field in _FIELDS.get(str(provider.get("type")), ()):
        if field.key in provider:
            continue
        default: DeploymentValue | None = getattr(defaults, field.default)
        if default is None:
            done.missing[field.key] = f"required: {field.missing}"
            continue
        value: object = default.value
        if field.key == "zone":
            value = [z.strip() for z in default.value.split(",") if z.strip()]
        provider[field.key] = value
        done.warnings.append(
            f"{path}.{field.key}: not set; using {default.value!r}, {field.what} ({default.source})"
        )
    return done
