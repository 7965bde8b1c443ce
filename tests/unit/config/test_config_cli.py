from __future__ import annotations

from pathlib import Path

import pytest
from config_helpers import EXAMPLES, aws_pool, dump
from typer.testing import CliRunner

from corral.cli.main import app

runner = CliRunner()


def run(*args: str) -> tuple[int, list[str], list[str]]:
    result = runner.invoke(app, ["config", "validate", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stdout.splitlines(), result.stderr.splitlines()


def test_valid_cluster_prints_ok_and_pools() -> None:
    code, out, err = run(str(EXAMPLES / "cluster.yaml"))
    assert code == 0
    assert out == [
        "ok",
        "pool default: aws g5.xlarge x 1 GPU, g5.12xlarge x 4 GPUs, 0..4 instances, "
        "spot with on-demand fallback after 10m, idle 30s",
        "pool a100: aws p4d.24xlarge x 8 GPUs, 0..1 instances, on-demand, idle 1m",
    ]
    # The local stack's pools name no instance profile; a deployment's would be filled in.
    assert [line.split(":", 2)[1] for line in err] == [
        " resource_pools[0].provider.iam_instance_profile_arn",
        " resource_pools[1].provider.iam_instance_profile_arn",
    ]
    assert all("cannot sign their requests" in line for line in err)


@pytest.mark.parametrize(
    ("fallback", "says"),
    [
        ("on_demand_fallback_after: 0s", "spot with on-demand fallback,"),
        ("on_demand_fallback_after: 90s", "spot with on-demand fallback after 1m30s,"),
        ("on_demand_fallback_after: never", "spot,"),
        ("on_demand_fallback: false", "spot,"),
    ],
)
def test_the_summary_says_when_a_spot_pool_falls_back(
    tmp_path: Path, fallback: str, says: str
) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(
        "resource_pools:\n"
        "  - name: gpu\n"
        "    provider: {type: aws, region: us-east-1, image_id: ami-12345678,\n"
        f"               instance_type: g5.xlarge, spot: true, {fallback}}}\n"
    )
    code, out, _ = run(str(config))
    assert code == 0
    assert f"instances, {says} idle" in out[1]


def test_pedl_file_summary_and_warning() -> None:
    code, out, err = run(str(EXAMPLES / "pedl-master.yaml"), "--kind", "cluster")
    assert code == 0
    assert out == [
        "ok",
        "pool default: aws p3.8xlarge x 4 GPUs, 0..5 instances, on-demand, idle 5m",
    ]
    assert err == ["warning: provisioner: read as resource pool 'default' (Determined spelling)"]


def test_invalid_cluster_prints_problems_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    pool = aws_pool(min_instances=3, max_instances=1)
    bad.write_text(dump({"resource_pools": [pool, aws_pool()]}))
    code, out, err = run(str(bad))
    assert code == 2
    assert out == []
    assert err == [
        "resource_pools[0].provider.max_instances: must be >= min_instances",
        "resource_pools[1].name: duplicate pool name 'default' (also resource_pools[0])",
    ]


def test_several_problems_one_line_each(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(dump({"resource_pools": [aws_pool(root_volume_size=10, spot="maybe")]}))
    code, _, err = run(str(bad))
    assert code == 2
    assert err == [
        "resource_pools[0].provider.root_volume_size: must be >= 100",
        "resource_pools[0].provider.spot: must be true or false",
    ]


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    code, out, err = run(str(missing))
    assert (code, out, err) == (2, [], [f"{missing}: no such file"])


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "syntax.yaml"
    bad.write_text("resource_pools:\n  - name: [a\n")
    code, out, err = run(str(bad))
    assert (code, out) == (2, [])
    assert len(err) == 1
    assert err[0].startswith(f"{bad}: invalid YAML at line 3")


def test_experiment_and_command_kinds() -> None:
    code, out, _ = run(str(EXAMPLES / "experiment.yaml"))
    assert code == 0
    assert out == [
        "ok",
        "experiment mnist-grid: 6 trials (grid searcher), 1 slot per trial, priority 42, "
        "on default",
    ]
    code, out, _ = run(str(EXAMPLES / "command.yaml"), "--kind", "command")
    assert code == 0
    assert out == ["ok", "command: 1 slot, the pool's default image, 1 bind mount"]


def test_wrong_kind_reports_problems() -> None:
    code, _, err = run(str(EXAMPLES / "command.yaml"), "--kind", "experiment")
    assert code == 2
    assert err == ["entrypoint: required"]
    code, _, err = run(str(EXAMPLES / "experiment.yaml"), "--kind", "cluster")
    assert code == 2
    assert "resource_pools: required" in err
