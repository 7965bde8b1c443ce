"""What the cluster config's GCP pools need from IAM beyond deploy.sh's fixed grants, one
tab-separated line each (deploy.sh turns each into a binding):

    disk     PROJECT ZONE NAME MODE   an existing disk a pool's base_config attaches (the seed's
                                      own example): scale_up must use it, and the name-prefix
                                      condition on instanceAdmin.v1 does not cover its name
    subnet   PROJECT REGION NAME      a shared VPC's subnetwork in another (host) project:
                                      scale_up needs Compute Network User on it
    warning  TEXT                     what deploy.sh cannot grant (printed, the deploy goes on)

The config is read with Corral's own loader (Corral's format or a Determined master.yaml),
filling what pools leave out from the environment as the functions do
(GOOGLE_CLOUD_PROJECT, CORRAL_ZONE, CORRAL_AGENT_IMAGE).

    python3 infra/gcp/iam_needs.py CONFIG_FILE [NAME_PREFIX]
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "functions"))

# Compute Engine resource paths, absolute (an API URL) or relative to the pool's project.
_API = re.compile(r"^https://(www|compute)\.googleapis\.com/compute/(v1|beta|alpha)/")
_DISK = re.compile(
    r"^(?:projects/(?P<project>[^/]+)/)?zones/(?P<zone>[^/]+)/disks/(?P<name>[^/]+)$"
)
_SUBNET = re.compile(
    r"^(?:projects/(?P<project>[^/]+)/)?regions/(?P<region>[^/]+)/subnetworks/(?P<name>[^/]+)$"
)
_NETWORK = re.compile(r"^(?:projects/(?P<project>[^/]+)/)?global/networks/(?P<name>[^/]+)$")


def _path(value: object) -> str:
    return _API.sub("", str(value).strip())


def disk_needs(
    pool: str, project: str, base_config: Mapping[str, Any], prefix: str
) -> Iterator[str]:
    for i, disk in enumerate(base_config.get("disks") or ()):
        if not isinstance(disk, Mapping) or disk.get("boot"):
            continue
        where = f"pool {pool!r} base_config.disks[{i}]"
        source = disk.get("source")
        if source:
            match = _DISK.match(_path(source))
            if match is None:
                yield (
                    f"warning\t{where}.source {source!r} is not zones/<zone>/disks/<name>: "
                    "grant scale_up compute.disks.use on it yourself"
                )
                continue
            mode = str(disk.get("mode") or "READ_WRITE").upper()
            yield "\t".join(
                ["disk", match["project"] or project, match["zone"], match["name"], mode]
            )
            continue
        name = (disk.get("initializeParams") or {}).get("diskName")
        if name and not str(name).startswith(f"{prefix}-"):
            yield (
                f"warning\t{where}: a new disk named {name!r} is outside the {prefix}- names "
                f"scale_up may create (name it {prefix}-...)"
            )


def network_needs(pool: str, project: str, network: str, subnetwork: str | None) -> Iterator[str]:
    if subnetwork:
        match = _SUBNET.match(_path(subnetwork))
        if match and match["project"] and match["project"] != project:
            yield "\t".join(["subnet", match["project"], match["region"], match["name"]])
        return
    match = _NETWORK.match(_path(network))
    if match and match["project"] and match["project"] != project:
        # Granting the role on the whole host project would let scale_up use every subnetwork
        # there: name the one the agents use instead.
        yield (
            f"warning\tpool {pool!r} uses the network {network!r} of another project (a shared "
            "VPC) without a subnetwork: set network_interface.subnetwork to the host's "
            "subnetwork, and deploy.sh grants Compute Network User on it"
        )


def needs(config: Any, prefix: str) -> list[str]:
    out: list[str] = []
    for pool in config.resource_pools:
        provider = pool.provider
        if getattr(provider, "type", None) != "gcp":
            continue
        out += disk_needs(pool.name, provider.project, provider.base_config, prefix)
        nic = provider.network_interface
        out += network_needs(pool.name, provider.project, nic.network, nic.subnetwork)
    return list(dict.fromkeys(out))  # once each, in config order


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: iam_needs.py CONFIG_FILE [NAME_PREFIX]", file=sys.stderr)
        return 2
    try:
        from corral.domain.config import ConfigError, defaults_from_env, load_cluster_config
    except ImportError as error:
        print(
            f"iam_needs.py: cannot import Corral's config loader ({error}): run deploy.sh with "
            "the project's venv (PYTHON=.venv/bin/python)",
            file=sys.stderr,
        )
        return 2
    try:
        loaded = load_cluster_config(Path(argv[1]), defaults_from_env(os.environ))
    except ConfigError as error:
        print(f"iam_needs.py: {argv[1]}: {error}", file=sys.stderr)
        return 1
    for line in needs(loaded.config, argv[2] if len(argv) == 3 else "corral-agent"):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
