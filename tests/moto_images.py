"""AMIs in moto with the root device a real image has.

moto's RegisterImage ignores ``RootDeviceName``: every image it makes reports ``/dev/sda1``
(docs/testing.md). The project's Amazon Linux 2023 image is ``/dev/xvda``, which is what the
launch's root volume mapping must follow, so tests set the name where moto keeps it (its
in-process backend; ``mock_aws`` only).
"""

from __future__ import annotations

from typing import Any

AL2023_ROOT = "/dev/xvda"


def register_image(ec2: Any, name: str, root_device: str = AL2023_ROOT) -> str:
    """Register an image through ``ec2`` (a moto client) whose root device is ``root_device``."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    image_id = str(ec2.register_image(Name=name, RootDeviceName=root_device)["ImageId"])
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][ec2.meta.region_name]
    backend.amis[image_id].root_device_name = root_device
    return image_id
