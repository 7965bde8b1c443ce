"""The local stack's moto server has the pools' images, as an account would: a launch reads
the image's root device (DescribeImages), and an image the account lacks fails it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from corral.local.moto_server import LOCAL_IMAGE_ROOT_DEVICE, MotoServer, aws_env, pool_images
from corral.local.stack import read_cluster_config

ROOT = Path(__file__).resolve().parents[3]


def test_the_pools_images_of_the_example_config() -> None:
    config = read_cluster_config((ROOT / "examples" / "cluster.yaml").read_text()).config

    assert pool_images(config) == ["ami-0123456789abcdef0"]


def test_the_server_has_each_image_in_every_region_with_the_agent_images_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = MotoServer(tmp_path / "moto.log")
    server.start(images=["ami-0123456789abcdef0", "ami-0fedcba9876543210"])
    try:
        for key, value in aws_env(server.endpoint).items():
            if value:
                monkeypatch.setenv(key, value)
            else:
                monkeypatch.delenv(key, raising=False)
        for region in ("us-east-1", "eu-west-1"):
            ec2: Any = boto3.client("ec2", region_name=region)
            images = ec2.describe_images(ImageIds=["ami-0123456789abcdef0"])["Images"]
            assert [(i["ImageId"], i["RootDeviceName"]) for i in images] == [
                ("ami-0123456789abcdef0", LOCAL_IMAGE_ROOT_DEVICE)
            ]
        with pytest.raises(ClientError, match=r"InvalidAMIID\.NotFound"):
            ec2.describe_images(ImageIds=["ami-00000000000000000"])
    finally:
        server.stop()
