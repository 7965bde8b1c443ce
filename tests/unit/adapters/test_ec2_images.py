"""RootDevices on the answers moto cannot give: an empty describe (an image deregistered
since), an instance-store image, an image without a root device name."""

from __future__ import annotations

from typing import Any

import pytest

from corral.adapters.aws.ec2_images import RootDevices
from corral.domain.errors import LaunchError, LaunchErrorClass

IMAGE = "ami-0123456789abcdef0"


class Ec2:
    def __init__(self, images: list[dict[str, Any]]) -> None:
        self.images = images
        self.calls: list[tuple[str, list[str]]] = []

    def describe_images(self, ImageIds: list[str]) -> dict[str, Any]:
        self.calls.append(("DescribeImages", ImageIds))
        return {"Images": self.images}


def devices(images: list[dict[str, Any]]) -> tuple[RootDevices, Ec2]:
    ec2 = Ec2(images)
    return RootDevices(lambda _region: ec2), ec2


def test_the_images_root_device_is_answered_and_kept_per_region_and_image() -> None:
    found, ec2 = devices([{"ImageId": IMAGE, "RootDeviceName": "/dev/xvda"}])

    assert found.of("us-east-1", IMAGE) == "/dev/xvda"
    assert found.of("us-east-1", IMAGE) == "/dev/xvda"
    assert found.of("eu-west-1", IMAGE) == "/dev/xvda"
    assert len(ec2.calls) == 2  # once per (region, image)


@pytest.mark.parametrize(
    ("images", "code"),
    [
        ([], "InvalidAMIID.NotFound"),
        ([{"ImageId": "ami-0ther", "RootDeviceName": "/dev/xvda"}], "InvalidAMIID.NotFound"),
        (
            [{"ImageId": IMAGE, "RootDeviceName": "/dev/sda1", "RootDeviceType": "instance-store"}],
            "InstanceStoreImage",
        ),
        ([{"ImageId": IMAGE}], "ImageWithoutRootDevice"),
    ],
)
def test_an_image_without_a_usable_root_device_fails_the_record(
    images: list[dict[str, Any]], code: str
) -> None:
    found, ec2 = devices(images)

    for _ in range(2):
        with pytest.raises(LaunchError) as caught:
            found.of("us-east-1", IMAGE)
        assert (caught.value.error_class, caught.value.code) == (
            LaunchErrorClass.INVALID_CONFIG,
            code,
        )
        assert IMAGE in caught.value.message
    assert len(ec2.calls) == 2  # a failure is not kept
