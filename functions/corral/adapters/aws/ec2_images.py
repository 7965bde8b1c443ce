"""The root device of each agent image, where a launch's ``root_volume_size`` goes.

AMIs differ: ``/dev/xvda`` on Amazon Linux (the project's own AL2023 image), ``/dev/sda1``
on Ubuntu and the Deep Learning AMIs. A ``BlockDeviceMappings`` entry for any other name is
not the root: EC2 attaches it as a second, unused (and billed) volume and the root keeps
the image's size. So the name comes from the image itself (``ec2:DescribeImages``, granted
to scale_up), asked once per (region, image): the provider lives as long as the warm
container, and an image's root device never changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral.adapters.aws.ec2_errors import launch_error
from corral.domain.errors import LaunchError


class RootDevices:
    """``of(region, image_id)``: the image's ``RootDeviceName``, described on first use.

    ``ec2``: the client for a region. Only answers are kept: a failed describe (throttled,
    refused) is asked again at the next launch. Botocore's errors pass through for the
    caller to classify, as it does those of RunInstances.
    """

    def __init__(self, ec2: Callable[[str], Any]) -> None:
        self._ec2 = ec2
        self._known: dict[tuple[str, str], str] = {}

    def of(self, region: str, image_id: str) -> str:
        key = (region, image_id)
        if key not in self._known:
            self._known[key] = self._describe(region, image_id)
        return self._known[key]

    def _describe(self, region: str, image_id: str) -> str:
        where = f"image {image_id} in {region}"
        # An unknown id fails the call (InvalidAMIID.NotFound, an invalid config); an image
        # deregistered since may instead come back empty or in another state.
        images = self._ec2(region).describe_images(ImageIds=[image_id]).get("Images") or []
        image = next((i for i in images if i.get("ImageId") == image_id), None)
        if image is None:
            raise launch_error(
                "InvalidAMIID.NotFound",
                f"{where}: no such image, or it is not shared with this account",
            )
        if image.get("RootDeviceType") == "instance-store":
            raise LaunchError.invalid_config(
                "InstanceStoreImage",
                f"{where} has an instance-store root; root_volume_size needs an EBS-backed image",
            )
        device = image.get("RootDeviceName")
        if not device:
            raise LaunchError.invalid_config(
                "ImageWithoutRootDevice", f"{where} names no root device"
            )
        return str(device)


__all__ = ["RootDevices"]
