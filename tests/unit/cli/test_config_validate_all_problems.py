"""``corral config validate`` prints every problem of a file in one run (exit 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner

from corral.cli.main import app

runner = CliRunner()

PROVIDER = {
    "type": "aws",
    "region": "us-east-1",
    "image_id": "ami-0123456789abcdef0",
    "instance_type": "p3.8xlarge",
}
EXPECTED = [
    "resource_pools[0].provider.root_volume_size: must be >= 100",
    "resource_pools[0].provider.max_instances: must be >= min_instances",
    "resource_pools[1].provider.spot_max_price: only allowed with spot: true",
    "resource_pools[2].name: duplicate pool name 'default' (also resource_pools[0])",
    "default_resource_pool: no pool named 'gpu' (pools: default, b)",
]


def write_bad_cluster(tmp_path: Path) -> Path:
    data = {
        "default_resource_pool": "gpu",
        "resource_pools": [
            {
                "name": "default",
                "provider": {
                    **PROVIDER,
                    "root_volume_size": 10,
                    "min_instances": 3,
                    "max_instances": 1,
                },
            },
            {"name": "b", "provider": {**PROVIDER, "spot_max_price": 1}},
            {"name": "default", "provider": PROVIDER},
        ],
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_cli_runner_reports_every_layer(tmp_path: Path) -> None:
    path = write_bad_cluster(tmp_path)
    result = runner.invoke(app, ["config", "validate", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == EXPECTED


def test_cli_process_reports_every_layer_without_traceback(tmp_path: Path) -> None:
    path = write_bad_cluster(tmp_path)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "corral"), "config", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == EXPECTED


def test_cli_experiment_reports_every_layer(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "entrypoint": "python3 train.py",
                "image": "a",
                "environment": {"image": "b"},
                "max_restarts": -1,
                "hyperparameters": {"lr": {"type": "double", "minval": 1, "maxval": 0}},
            },
            sort_keys=False,
        )
    )
    result = runner.invoke(app, ["config", "validate", str(path)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "image: differs from environment.image: set only one",
        "hyperparameters.lr.minval: must be <= maxval",
        "max_restarts: must be >= 0",
    ]


def test_cli_experiment_whose_values_would_overflow_is_a_config_error(tmp_path: Path) -> None:
    """Not "internal error: OverflowError" (exit 1): the field, and exit 2."""
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: x\nentrypoint: [python, t.py]\nhyperparameters:\n"
        "  a: {type: log, base: 10, minval: 1000, maxval: 2000, count: 3}\n"
        "  b: {type: const, val: .nan}\nsearcher: {name: grid}\n"
    )
    result = runner.invoke(app, ["config", "validate", "-k", "experiment", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "hyperparameters.a.minval: 10**1000 is out of range (a float holds up to about 1.8e308)",
        "hyperparameters.a.maxval: 10**2000 is out of range (a float holds up to about 1.8e308)",
        "hyperparameters.b.val: must be a finite number",
    ]
