"""The AWS service models Corral's clients load: botocore's own, cut down to the operations
Corral calls.

Why: a boto3 client parses its service's whole model when it is created. EC2's has 4,400
shapes (about 0.05 s on a fast machine, 0.15 s on a slow one: more than ``import boto3``),
SSM's 1,360 (0.01 to 0.03 s), and every cold start of a function that creates one of those
clients pays for it. Corral calls eight EC2 operations and one of SSM's. ``models/`` holds
those two services reduced to the operations in :data:`OPERATIONS` and the shapes they reach
(documentation dropped), written by this module from botocore's files:

    python -m corral.adapters.aws.service_models    # after changing OPERATIONS

``corral.adapters.aws.clients`` puts ``models/`` first on its session's data path. botocore
looks a file up path by path, so only ``service-2.json`` of these two services comes from
here; endpoint rules, paginators, waiters and every other service still come from the
botocore that is installed (the Lambda runtime's, as deployed). A model is written under
the API version botocore itself uses; should a later botocore bring a newer API version,
its full model wins, which is slower but still correct. DynamoDB's and SQS's models are not
trimmed: they are small enough that a trimmed one saved nothing measurable (the rest of
creating a client costs more).

An operation missing here is missing from the client (``AttributeError``), so the tests
record every call the adapters make under moto and check it against :data:`OPERATIONS`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

MODELS_DIR = Path(__file__).resolve().parent / "models"

# Operation names as the service model spells them (boto3's snake_case method names map to
# these: run_instances -> RunInstances).
OPERATIONS: Mapping[str, tuple[str, ...]] = {
    "ec2": (
        "CancelSpotInstanceRequests",
        "DescribeImages",
        "DescribeInstances",
        "DescribeSpotInstanceRequests",
        "RunInstances",
        "StartInstances",
        "StopInstances",
        "TerminateInstances",
    ),
    "ssm": ("GetParameter",),
}

_SHAPE_REFERENCES = ("member", "key", "value")


def trim(model: Mapping[str, Any], operations: Iterable[str]) -> dict[str, Any]:
    """``model`` with only ``operations`` and the shapes their inputs, outputs and errors
    reach; documentation removed (botocore reads it only to write docstrings)."""
    shapes: Mapping[str, Any] = model["shapes"]
    kept: dict[str, Any] = {}

    def keep(name: str) -> None:
        if name in kept:
            return
        shape = {k: v for k, v in shapes[name].items() if k != "documentation"}
        if "members" in shape:
            shape["members"] = {
                member: {k: v for k, v in ref.items() if k != "documentation"}
                for member, ref in shape["members"].items()
            }
        kept[name] = shape
        for ref in [shape[k] for k in _SHAPE_REFERENCES if k in shape]:
            keep(ref["shape"])
        for ref in shape.get("members", {}).values():
            keep(ref["shape"])

    wanted: dict[str, Any] = {}
    for name in sorted(operations):
        operation = {k: v for k, v in model["operations"][name].items() if k != "documentation"}
        wanted[name] = operation
        refs = [operation[k] for k in ("input", "output") if k in operation]
        for ref in [*refs, *operation.get("errors", ())]:
            keep(ref["shape"])
    out = {k: v for k, v in model.items() if k not in ("operations", "shapes", "documentation")}
    return out | {"operations": wanted, "shapes": dict(sorted(kept.items()))}


def write_models(dest: Path = MODELS_DIR) -> list[Path]:
    """Write the trimmed models from the installed botocore under ``dest``."""
    from botocore.loaders import Loader  # type: ignore[import-untyped]

    loader = Loader()  # botocore's bundled data only, whatever AWS_DATA_PATH says
    written = []
    for service, operations in sorted(OPERATIONS.items()):
        version = loader.determine_latest_version(service, "service-2")
        model = loader.load_service_model(service, "service-2", version)
        path = dest / service / version / "service-2.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(trim(model, operations), indent=1, sort_keys=True) + "\n")
        written.append(path)
    return written


def main() -> int:
    import botocore  # type: ignore[import-untyped]

    for path in write_models():
        print(f"wrote {path.relative_to(MODELS_DIR.parent)} (botocore {botocore.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
