"""The dashboard in headless Chromium against the local stack, driven as a user would.

One stack (timers 4x faster), two experiments submitted with the CLI:

- "curves": two 8-GPU trials in the ``a100`` pool, which holds one instance, so the second
  trial waits (PENDING, with the planner's reason) while the first runs; both complete and
  report validation losses, drawn as one learning curve per trial;
- "long": one spot trial in the ``default`` pool, long enough to have its instance
  interrupted (``corral dev interrupt``: the event log shows it) and to be killed from the
  page (the confirm dialog accepted).

Screenshots of each step go to the artifacts folder (see conftest.py). Every wait is a
bounded poll of what the page shows; the page refreshes every second (``?refresh=1``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.cli.dashboard_cmd import BearerSigner
from corral.cli.dashboard_proxy import DashboardProxy
from corral.local.state import StateDir
from tests.e2e.local_stack import corral, corral_json, running_stack, wait_for

pytestmark = pytest.mark.e2e

WORKSPACE_TRAIN = 'exec python3 "${CORRAL_WORKSPACE:-/workspace}/examples/train.py"'
CURVES = """
name: dashboard-curves
entrypoint: [sh, -c, '{train}']
resources: {{slots_per_trial: 8, resource_pool: a100}}
hyperparameters:
  learning_rate: {{type: categorical, vals: [0.05, 0.5]}}
  batch_size: 32
  epochs: 3
  steps_per_epoch: 6
  seconds_per_step: 0.2
  checkpoint_every: 3
searcher: {{name: grid, metric: validation_loss, smaller_is_better: true}}
checkpoint_storage: {{type: shared_fs, host_path: {checkpoints}}}
"""
LONG = """
name: dashboard-long
entrypoint: [sh, -c, '{train}']
resources: {{slots_per_trial: 1, resource_pool: default}}
hyperparameters: {{epochs: 1, steps_per_epoch: 1000, seconds_per_step: 0.25}}
max_restarts: 2
checkpoint_storage: {{type: shared_fs, host_path: {checkpoints}}}
"""
# Form controls and buttons a screen reader could not name.
UNLABELLED = """() => [...document.querySelectorAll("input, select, textarea, button")]
  .filter(el => !(el.labels && el.labels.length) && !el.getAttribute("aria-label")
                && !el.textContent.trim())
  .map(el => el.outerHTML.slice(0, 120))"""
ROWS = """rows => rows.map(r => ({
  key: r.dataset.key,
  cells: [...r.children].map(c => c.innerText.trim()),
}))"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StateDir]:
    with running_stack(tmp_path_factory.mktemp("dashboard") / "dev") as state_dir:
        yield StateDir(state_dir)


class Dashboard:
    """One browser page on the dashboard, with what the tests read from it."""

    def __init__(self, browser: Any, url: str, artifacts: Path, width: int = 1280) -> None:
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.artifacts = artifacts
        self.problems: list[str] = []
        # Script errors and CSP refusals fail the test; failed API calls are the banner's job.
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("console", self._console)
        self.page.on("dialog", lambda dialog: dialog.accept())
        self.page.goto(url)

    def _console(self, message: Any) -> None:
        if message.type == "error" and "Failed to load resource" not in message.text:
            self.problems.append(f"console: {message.text}")

    def go(self, route: str) -> None:
        self.page.evaluate("route => { location.hash = route; }", route)

    def rows(self, selector: str) -> list[dict[str, Any]]:
        return list(self.page.locator(f"{selector} tbody tr[data-key]").evaluate_all(ROWS))

    def row(self, selector: str, key: str) -> list[str] | None:
        return next((r["cells"] for r in self.rows(selector) if r["key"] == key), None)

    def unlabelled(self) -> list[str]:
        return list(self.page.evaluate(UNLABELLED))

    def banner(self) -> str:
        banner = self.page.locator("#error-banner")
        return banner.inner_text() if banner.is_visible() else ""

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.artifacts / f"{name}.png"), full_page=True)


def write(tmp_path: Path, name: str, template: str) -> Path:
    path = tmp_path / name
    path.write_text(template.format(train=WORKSPACE_TRAIN, checkpoints=tmp_path / "checkpoints"))
    return path


def painted_pixels(page: Any, selector: str) -> int:
    """Pixels of the chart's series canvas that are neither blank nor the grey of the grid."""
    return int(
        page.locator(f"{selector} canvas").evaluate(
            """canvas => {
                const context = canvas.getContext("2d");
                const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
                let n = 0;
                for (let i = 0; i < data.length; i += 4) {
                  const [r, g, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
                  const grey = Math.abs(r - g) < 12 && Math.abs(g - b) < 12;
                  if (a > 0 && !grey) n += 1;
                }
                return n;
            }"""
        )
    )


def test_a_user_watches_kills_and_sees_interruptions_in_the_dashboard(
    browser: Any, stack: StateDir, artifacts: Path, tmp_path: Path
) -> None:
    url, token = stack.endpoint(), stack.token()
    assert url and token
    state_dir = stack.root

    # A wrong token is an error in the page, naming the status, not an empty table.
    wrong = Dashboard(browser, f"{url}/?refresh=1#token=not-the-token", artifacts)
    wait_for("the 401 banner", lambda: "401" in wrong.banner(), 15, poll=0.2)
    assert "unknown token" in wrong.banner()
    wrong.shot("00-wrong-token")
    wrong.page.close()

    ui = Dashboard(browser, f"{url}/?refresh=1#token={token}", artifacts)
    # The token moved from the address bar into the tab's storage.
    assert "token" not in ui.page.evaluate("location.hash")
    curves = corral_json(state_dir, "experiment", "create", str(write(tmp_path, "c.yaml", CURVES)))
    long = corral_json(state_dir, "experiment", "create", str(write(tmp_path, "l.yaml", LONG)))
    assert curves["trial_count"] == 2 and long["trial_count"] == 1

    # Submitted through the CLI, shown in the page.
    wait_for(
        "both experiments listed",
        lambda: ui.row("#experiments", curves["id"]) and ui.row("#experiments", long["id"]),
        15,
        poll=0.2,
    )
    ui.shot("01-experiments")

    # The a100 pool holds one instance: the second 8-GPU trial waits, and says why.
    ui.go(f"#/experiments/{curves['id']}")

    def pending_with_reason() -> list[str] | None:
        for cells in (r["cells"] for r in ui.rows("#trials")):
            if cells[1] == "PENDING" and cells[3] not in ("", "—"):
                return cells
        return None

    wait_for("a PENDING trial with a reason", pending_with_reason, 20, poll=0.2)
    ui.shot("02-trial-pending")

    # Interrupt the spot instance of the long trial once it runs: the event log shows it.
    def long_running() -> str | None:
        trial = corral_json(state_dir, "experiment", "describe", long["id"])["trials"][0]
        return trial["placement"][0]["instance_id"] if trial["state"] == "RUNNING" else None

    record = wait_for("the long trial running", long_running, 40, poll=0.5)
    interrupted = corral(state_dir, "dev", "interrupt", record, "--notice", "2")
    assert interrupted.returncode == 0, interrupted.stderr
    ui.go("#/events")
    ui.page.get_by_label("Kind", exact=True).select_option("spot_interruption")
    assert ui.unlabelled() == []
    events = wait_for(
        "the interruption in the event log", lambda: ui.rows("#events") or None, 15, 0.2
    )
    assert events[0]["cells"][1] == "spot_interruption"
    assert record in events[0]["cells"][4], events[0]
    ui.shot("03-event-log-interruption")

    # Kill the long experiment from the page (the confirm dialog is accepted).
    ui.go("#/experiments")
    kill = ui.page.locator(f'#experiments button[data-kill="{long["id"]}"]')
    kill.wait_for(timeout=10_000)
    kill.click()
    wait_for(
        "the killed experiment to stop",
        lambda: (ui.row("#experiments", long["id"]) or [None, ""])[1] in ("STOPPING", "CANCELLED"),
        20,
        poll=0.2,
    )
    assert corral_json(state_dir, "experiment", "describe", long["id"])["killed_at"] is not None
    ui.shot("04-killed")

    # Both curve trials complete, and each draws its learning curve.
    ui.go(f"#/experiments/{curves['id']}")
    wait_for(
        "both curve trials COMPLETED",
        lambda: [r["cells"][1] for r in ui.rows("#trials")] == ["COMPLETED", "COMPLETED"],
        60,
        poll=0.5,
    )
    wait_for(
        "a curve per trial",
        lambda: ui.page.get_attribute("#curves-chart", "data-series") == "2",
        15,
        0.2,
    )
    legend = ui.page.locator("#curves-chart .u-legend .u-series th").all_inner_texts()
    assert [t.strip() for t in legend[1:]] == ["t0000", "t0001"], legend
    assert painted_pixels(ui.page, "#curves-chart") > 200
    # The log of a trial, followed to its end.
    ui.page.locator('button[data-log-trial$=".t0000"]').click()
    wait_for("the whole log", lambda: "the whole log" in ui.page.inner_text("#log-state"), 15, 0.2)
    assert ui.page.inner_text("#trial-log").strip()
    assert ui.unlabelled() == []
    ui.shot("05-curves-and-log")

    # The fleet views at a laptop's and at a narrow width.
    for name in ("agents", "pools"):
        ui.go(f"#/{name}")
        ui.page.locator(f"#{name} table").wait_for(timeout=10_000)
        assert ui.unlabelled() == [], name
        ui.shot(f"06-{name}-1280")
    # Drawn after the capacity sample arrives: slow on a loaded machine (it read 0 once).
    wait_for(
        "the capacity chart's three series",
        lambda: ui.page.get_attribute("#capacity-chart", "data-series") == "3",
        15,
        0.2,
    )
    assert ui.page.get_attribute("#capacity-chart", "data-series") == "3"
    ui.page.set_viewport_size({"width": 800, "height": 900})
    # The charts follow their frame's width; wide tables scroll inside theirs, not the page.
    scroll_width = "document.documentElement.scrollWidth"
    wait_for("the page to fit 800 px", lambda: ui.page.evaluate(scroll_width) <= 800, 10, 0.2)
    ui.shot("07-pools-800")

    assert ui.banner() == "", ui.banner()
    assert ui.problems == [], ui.problems


def test_the_signing_proxy_serves_the_dashboard(
    browser: Any, stack: StateDir, artifacts: Path
) -> None:
    """``corral dashboard``'s proxy in front of the local stack (it signs with the stack's
    bearer token here, with SigV4 when deployed): the same page works through it."""
    url, token = stack.endpoint(), stack.token()
    assert url and token
    proxy = DashboardProxy(url, BearerSigner(token))
    proxy.start()
    try:
        ui = Dashboard(browser, proxy.page_url.replace("/#", "/?refresh=1#"), artifacts)
        ui.go("#/pools")
        ui.page.locator("#pools table").wait_for(timeout=10_000)
        assert [r["key"] for r in ui.rows("#pools")] == ["default", "a100"]
        ui.shot("08-through-the-proxy")
        assert ui.banner() == "" and ui.problems == []
    finally:
        proxy.stop()
