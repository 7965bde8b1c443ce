"""``corral sim`` refuses bad input before it simulates: one ``where: what`` line per problem
on stderr, exit 2, never an ``internal error``, a run without end, or a file written where the
user did not say."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import pytest
from typer.testing import CliRunner

import corral.sim.plot
import corral.sim.runner
import corral.sim.synthetic
from corral.cli.main import app
from corral.domain.config import ConfigError, load_cluster_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIG = str(EXAMPLES / "sim-cluster.yaml")
TRACE = str(EXAMPLES / "tiny-trace.csv")


def sim(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["sim", *args])
    return result.exit_code, result.stdout, result.stderr


def _never(*_: Any, **__: Any) -> NoReturn:
    raise AssertionError("the input was bad; nothing should have been simulated")


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail if the command gets as far as generating or replaying jobs (the CLI imports
    both at call time, from these modules)."""
    monkeypatch.setattr(corral.sim.runner, "simulate", _never)
    monkeypatch.setattr(corral.sim.synthetic, "generate", _never)


# ---- --jobs --------------------------------------------------------------------------------
@pytest.mark.usefixtures("no_run")
def test_too_many_synthetic_jobs_are_refused_before_any_is_generated() -> None:
    # --jobs 1000000000 grew the generator to gigabytes within seconds.
    code, out, err = sim("--format", "synthetic-philly", "--jobs", "1000000000", "--config", CONFIG)
    assert (code, out) == (2, "")
    assert err.strip() == "--jobs: must be at most 200,000, got 1,000,000,000"


def test_the_generator_has_the_same_bound() -> None:
    from corral.sim.synthetic import MAX_JOBS

    assert MAX_JOBS == 200_000  # docs/simulator.md and --help say so
    with pytest.raises(ValueError, match="jobs: must be 1 to 200,000, got 200,001"):
        corral.sim.synthetic.generate("philly", jobs=MAX_JOBS + 1)


# ---- --plot --------------------------------------------------------------------------------
@pytest.mark.usefixtures("no_run")
def test_plot_to_a_directory_is_refused_and_nothing_is_written_beside_it(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "plots"
    target.mkdir()
    code, out, err = sim("--trace", TRACE, "--config", CONFIG, "--plot", str(target))
    assert (code, out) == (2, "")
    assert err.strip() == (
        f"--plot: {target} is a directory; name an image file in it (e.g. {target / 'sim.png'})"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plots"]  # no plots.png


@pytest.mark.usefixtures("no_run")
@pytest.mark.parametrize(("name", "got"), [("out.txt", "'.txt'"), ("out", "none")])
def test_plot_needs_an_image_extension(tmp_path: Path, name: str, got: str) -> None:
    # out.txt was "internal error: ValueError: Format 'txt' is not supported", after the run;
    # out (no extension) wrote out.png.
    pytest.importorskip("matplotlib")
    target = tmp_path / name
    code, out, err = sim("--trace", TRACE, "--config", CONFIG, "--plot", str(target))
    assert (code, out) == (2, "")
    line = err.strip()
    assert line.startswith(f"--plot: {target}: the file must end in one of ")
    listed = line.split(" one of ")[1].split(" (the image format)")[0].split(", ")
    assert {".png", ".svg", ".pdf", ".jpg"} <= set(listed)
    assert ".pgf" not in listed  # it needs a LaTeX installation
    assert line.endswith(f"(the image format), got {got}")
    assert "internal error" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("no_run")
def test_plot_into_a_missing_directory_is_refused_before_the_run(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "nope" / "out.png"
    code, _, err = sim("--trace", TRACE, "--config", CONFIG, "--plot", str(target))
    assert code == 2
    assert err.strip() == f"--plot: {target}: no directory {target.parent}"


@pytest.mark.usefixtures("no_run")
def test_plot_without_matplotlib_is_refused_before_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def missing() -> NoReturn:
        raise corral.sim.plot.PlotUnavailable("--plot needs matplotlib: pip install 'corral[sim]'")

    monkeypatch.setattr(corral.sim.plot, "_pyplot", missing)
    code, _, err = sim("--trace", TRACE, "--config", CONFIG, "--plot", str(tmp_path / "a.png"))
    assert code == 2
    assert err.strip() == "--plot needs matplotlib: pip install 'corral[sim]'"


def test_plot_writes_exactly_the_file_named_in_its_format(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "out.SVG"  # the extension picks the format, whatever its case
    code, _, _ = sim("--trace", TRACE, "--config", CONFIG, "--plot", str(target), "--json")
    assert code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["out.SVG"]
    assert b"<svg" in target.read_bytes()[:1000]


# ---- simulation.determined_instance_type ---------------------------------------------------
def _config_with(tmp_path: Path, instance_type: str) -> Path:
    config = tmp_path / "c.yaml"
    text = (EXAMPLES / "sim-cluster.yaml").read_text(encoding="utf-8")
    config.write_text(
        text.replace("  seed: 0\n", f"  seed: 0\n  determined_instance_type: {instance_type}\n"),
        encoding="utf-8",
    )
    return config


POOL_OFFERS = "p3.2xlarge, p3.8xlarge, p3.16xlarge"


@pytest.mark.usefixtures("no_run")
@pytest.mark.parametrize(
    ("instance_type", "reason"),
    [
        (
            "nosuch.type",
            "unknown instance type 'nosuch.type' (the default pool 'v100', where every simulated"
            f" job runs, offers {POOL_OFFERS})",
        ),
        (
            "g5.xlarge",  # in the catalog, but the pool cannot launch it
            "'g5.xlarge' is not offered by the default pool 'v100', where every simulated job"
            f" runs (it offers {POOL_OFFERS})",
        ),
    ],
)
@pytest.mark.parametrize("policy", ["determined", "corral"])
def test_a_determined_type_the_pool_does_not_offer_is_refused(
    tmp_path: Path, instance_type: str, reason: str, policy: str
) -> None:
    # It launched nothing: "completed 0, cost_usd 0", exit 0.
    config = _config_with(tmp_path, instance_type)
    code, out, err = sim("--trace", TRACE, "--config", str(config), "--policy", policy)
    assert (code, out) == (2, "")
    assert err.strip() == f"simulation.determined_instance_type: {reason}"


def test_simulate_refuses_it_too(tmp_path: Path) -> None:
    from corral.sim.runner import simulate
    from corral.sim.trace import read_trace

    cluster = load_cluster_config(_config_with(tmp_path, "nosuch.type")).config
    with pytest.raises(ConfigError) as caught:
        simulate(cluster, read_trace(Path(TRACE)), "determined")
    assert [p.path for p in caught.value.problems] == ["simulation.determined_instance_type"]


def test_a_determined_type_of_the_pool_is_used(tmp_path: Path) -> None:
    config = _config_with(tmp_path, "p3.8xlarge")
    code, out, _ = sim(
        "--trace", TRACE, "--config", str(config), "--policy", "determined", "--json"
    )
    assert code == 0
    assert json.loads(out)["completed"] == 10
