"""CLI polish: tables readable at 80 columns, hyperparameters on one line, ``--version``,
``--follow`` printing each change of a pending reason, one error text per failure, metrics in
``describe``, and the ``make run`` banner with the token and the dashboard URL."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from corral.cli import agent_cmd, experiment_cmd, pool_cmd, render
from corral.cli.experiment_cmd import follow_experiment
from corral.cli.main import app
from corral.domain.metrics import IncomingPoint, MetricKind, merge, new_series
from corral.local.stack import DevStack, StackOptions
from corral.local.state import StateDir
from tests.services.harness import Cluster

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

AGENTS = [
    {
        "id": "inst-000001",
        "cloud_id": "i-0123456789abcdef0",
        "state": "BUSY",
        "instance_type": "g5.12xlarge",
        "capacity_type": "on-demand",
        "slots": 4,
        "free_slots": 1,
        "trials": ["exp-000001.t0000", "exp-000001.t0001", "exp-000001.t0002"],
        "idle_s": None,
        "cost_usd": 12.3456,
    },
    {
        "id": "inst-000002",
        "state": "IDLE",
        "instance_type": "g5.xlarge",
        "capacity_type": "spot",
        "slots": 1,
        "free_slots": 1,
        "trials": [],
        "idle_s": 302,
        "cost_usd": 0.0123,
    },
]
TRIALS = [
    {
        "id": "exp-000001.t0000",
        "state": "PENDING",
        "slots": 1,
        "placement": [],
        "restarts": 0,
        "max_restarts": 2,
        "cost_usd": 0.0,
        "best_value": None,
        "hyperparameters": {"learning_rate": 0.05, "batch_size": 32, "layers": [64, 64]},
        "pending_reason": "waiting for a new g5.xlarge (spot) to boot and register: "
        "requested 12 s ago",
    },
    {
        "id": "exp-000001.t0001",
        "state": "COMPLETED",
        "slots": 1,
        "placement": [{"instance_id": "inst-000001"}],
        "restarts": 1,
        "max_restarts": 2,
        "cost_usd": 0.25,
        "best_value": 0.3123456,
        "hyperparameters": {"learning_rate": 0.2, "optimizer": "adam"},
        "pending_reason": None,
    },
]
POOLS = [
    {
        "name": "default",
        "is_default": True,
        "instances_by_state": {"IDLE": 1, "BUSY": 2},
        "min_instances": 0,
        "max_instances": 4,
        "trials_pending": 3,
        "trials_running": 2,
        "offerings": [{"key": "g5.xlarge|a|spot"}, {"key": "b", "available": False}],
        "budget": {"spent_usd": 1.2},
        "blocked_reason": None,
        "cannot_serve": "2 pending trial(s) no launch serves: at max_instances (4)",
    }
]
EXPERIMENTS = [
    {
        "id": "exp-000001",
        "name": "logreg-grid-search-with-a-long-name",
        "state": "ACTIVE",
        "pool": "default",
        "trials_by_state": {"PENDING": 2, "RUNNING": 1, "COMPLETED": 1},
        "best": {"trial_id": "exp-000001.t0001", "metric": "validation_loss", "value": 0.31},
        "submitted_at": None,
        "cost_usd": 0.3,
        "owner": "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Dev/alice@example.com",
    }
]


def rendered(columns: list[render.Column], rows: list[dict[str, Any]], width: int) -> str:
    console = Console(width=width, record=True, highlight=False, color_system=None)
    saved = render.console
    render.console = console
    try:
        render.table("Rows", columns, rows)
    finally:
        render.console = saved
    return console.export_text()


@pytest.mark.parametrize(
    ("columns", "rows"),
    [
        (agent_cmd.AGENT_COLUMNS, AGENTS),
        (render.TRIAL_COLUMNS, TRIALS),
        (pool_cmd.POOL_COLUMNS, POOLS),
        (experiment_cmd.EXPERIMENT_COLUMNS, EXPERIMENTS),
    ],
)
@pytest.mark.parametrize("width", [80, 100, 160])
def test_tables_fit_and_never_break_a_header_or_an_id(
    columns: list[render.Column], rows: list[dict[str, Any]], width: int
) -> None:
    text = rendered(columns, rows, width)
    lines = text.splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), text
    header = lines[1]
    shown = [c for c in columns if isinstance(c, render.Col) and c.header in header]
    assert shown[0] is columns[0]  # the id column always stays
    for col in shown:  # a header is never folded onto two lines ("OFFERI" / "NG")
        assert re.search(rf"(^| ){re.escape(col.header)}( |$)", header), (col.header, text)
    first = str(columns[0].get(rows[0])) if isinstance(columns[0], render.Col) else ""
    assert re.search(rf"^{re.escape(first)} ", lines[3]), text  # ids are whole


def test_at_80_columns_low_value_columns_go_and_long_values_are_cut() -> None:
    agents = rendered(agent_cmd.AGENT_COLUMNS, AGENTS, 80)
    assert "OFFERING" in agents and "CLOUD ID" not in agents
    assert "g5.12xlarge on…" in agents  # cut on its line, never folded onto the next
    wide = rendered(agent_cmd.AGENT_COLUMNS, AGENTS, 160)
    assert "CLOUD ID" in wide and "i-0123456789abcdef0" in wide
    trials = rendered(render.TRIAL_COLUMNS, TRIALS, 80)
    assert "…" in trials  # hyperparameters cut on their one line, not folded
    words = set(trials.split())
    reason = str(TRIALS[0]["pending_reason"]).split()
    assert all(w in words for w in reason), trials  # the reason wraps at spaces, whole


def test_hyperparameters_are_one_line() -> None:
    hp = {"lr": 0.1, "layers": [64, 64], "optimizer": "adam", "schedule": {"warmup": 5}}
    assert render.hparams(hp) == 'layers=[64,64] lr=0.1 optimizer=adam schedule={"warmup":5}'
    assert render.hparams({}) == "-" and render.hparams(None) == "-"
    wide = rendered(render.TRIAL_COLUMNS, TRIALS, 200)
    assert "batch_size=32 layers=[64,64] learning_rate=0.05" in wide


def test_version_comes_from_the_package_metadata() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"corral {metadata.version('corral')}\n"


class ScriptedClient:
    """Replies to GET /experiments/{id} from a list of details, one per poll."""

    def __init__(self, details: list[dict[str, Any]]) -> None:
        self.details = details

    def get(self, path: str, params: Any = None) -> dict[str, Any]:
        return self.details.pop(0) if len(self.details) > 1 else self.details[0]


def detail(state: str, *trials: tuple[str, str | None]) -> dict[str, Any]:
    return {
        "state": state,
        "trials": [
            {"id": "e.t0", "state": s, "pending_reason": r, "placement": []} for s, r in trials
        ],
    }


def test_follow_prints_each_change_of_a_pending_reason_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    console = Console(width=200, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    client = ScriptedClient(
        [
            detail("ACTIVE", ("PENDING", "waiting for the next schedule pass")),
            detail("ACTIVE", ("PENDING", "waiting for the next schedule pass")),
            detail("ACTIVE", ("PENDING", "waiting for a new g5.xlarge to boot")),
            detail("ACTIVE", ("PENDING", "waiting for a new g5.xlarge to boot")),
            detail("ACTIVE", ("PENDING", "at max_instances (4)")),
            detail("COMPLETED", ("COMPLETED", None)),
        ]
    )
    follow_experiment(client, "e", poll_s=0)  # type: ignore[arg-type]
    lines = [x for x in console.export_text().splitlines() if x.startswith("e.t0: ")]
    assert lines == [
        "e.t0: PENDING (waiting for the next schedule pass)",
        "e.t0: PENDING (waiting for a new g5.xlarge to boot)",
        "e.t0: PENDING (at max_instances (4))",
        "e.t0: COMPLETED",
    ]


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_a_failure_says_its_message_once(api: tuple[str, Cluster], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("entrypoint: python x.py\nresources: {resource_pool: nope}\n")
    result = cli("experiment", "create", str(bad))
    assert result.exit_code == 2
    assert result.output.count("no pool named 'nope'") == 1, result.output
    assert result.output.startswith("error: resources.resource_pool: no pool named 'nope'")


def test_describe_shows_metrics_and_the_best_trial(
    api: tuple[str, Cluster], tmp_path: Path
) -> None:
    _, cluster = api
    grid = tmp_path / "grid.yaml"
    grid.write_text((EXAMPLES / "grid.yaml").read_text().replace("resource_pool: default", ""))
    created = json.loads(cli("experiment", "create", str(grid), "--json").output)
    t0, t1 = created["trials"][0]["id"], created["trials"][1]["id"]
    for trial_id, losses in ((t0, [0.5, 0.4]), (t1, [0.45, 0.25])):
        series = new_series(trial_id, created["id"], MetricKind.VALIDATION, "validation_loss")
        points = [
            IncomingPoint(n, 20 * (n + 1), {"validation_loss": v, "accuracy": 0.9}, 1.7e9)
            for n, v in enumerate(losses)
        ]
        cluster.store.put_metric_series(merge(series, points).series)
    experiment = cli("experiment", "describe", created["id"])
    assert experiment.exit_code == 0, experiment.output
    assert f"validation_loss=0.25 ({t1})" in experiment.output
    trial = cli("trial", "describe", t1)
    assert trial.exit_code == 0, trial.output
    assert re.search(r"best value\W+0\.25\b", trial.output)
    assert re.search(r"last validation\W+accuracy=0\.9 validation_loss=0\.25", trial.output)
    assert re.search(r"last training\W+- ", trial.output)
    assert "batch_size=64 checkpoint_every=5 epochs=4 learning_rate=0.05" in trial.output


def test_the_banner_prints_the_token_and_the_dashboard_url(tmp_path: Path) -> None:
    stack = DevStack(StackOptions(cluster_config=tmp_path / "c.yaml", state=StateDir(tmp_path)))
    stack.api_url, stack.user_token = "http://127.0.0.1:8080", "tok-123"
    banner = stack.banner()
    assert "dashboard:  http://127.0.0.1:8080/#token=tok-123" in banner
    assert re.search(r"token:\s+tok-123 ", banner)
    assert str(stack.state.token_file) in banner
    assert "user local, an admin" in banner and "corral dev user add NAME" in banner
