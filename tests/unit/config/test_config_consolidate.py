"""`consolidate`: read from the pool's provider block, said in the validate summary, and a
bad value named by its path."""

from __future__ import annotations

from pathlib import Path

from config_helpers import aws_pool, cluster_problems, dump
from typer.testing import CliRunner

from corral.cli.main import app
from corral.domain.config import load_cluster_config

runner = CliRunner()


def test_pools_do_not_consolidate_unless_asked() -> None:
    config = load_cluster_config(dump({"resource_pools": [aws_pool()]})).config
    assert config.resource_pools[0].consolidate is False
    asked = load_cluster_config(dump({"resource_pools": [aws_pool(consolidate=True)]})).config
    assert asked.resource_pools[0].consolidate is True


def test_the_validate_summary_says_a_pool_consolidates(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "resource_pools:\n"
        "  - name: gpu\n"
        "    provider: {type: aws, region: us-east-1, image_id: ami-12345678,\n"
        "               instance_type: g5.xlarge, consolidate: true}\n"
    )
    result = runner.invoke(app, ["config", "validate", str(path)])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[1].endswith(", idle 20m, consolidates")


def test_a_bad_value_is_named_by_its_path() -> None:
    (problem,) = cluster_problems({"resource_pools": [aws_pool(consolidate="sometimes")]})
    assert problem.startswith("resource_pools[0].provider.consolidate: ")
