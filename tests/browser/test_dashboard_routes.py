"""The dashboard's routes on the real resolver: its files are served without credentials,
with the right types and validators, nothing else of the package is; the capacity sample
needs a user and counts GPUs as the fleet holds them."""

from __future__ import annotations

import fnmatch
import re
import tomllib

import pytest

from corral.api import dashboard
from corral.domain.instance import InstanceState
from corral.domain.trial import TrialState
from tests.api.conftest import ApiClient
from tests.e2e.local_stack import ROOT
from tests.services.harness import Cluster, make_pool
from tests.services.test_warm_pool import cluster_with, park_one

JS = "text/javascript; charset=utf-8"


@pytest.fixture
def api() -> ApiClient:
    return ApiClient(Cluster(make_pool(max_instances=2)))


def test_the_page_is_served_at_the_root_without_credentials(api: ApiClient) -> None:
    reply = api.get("/", caller=None)
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/html; charset=utf-8"
    assert reply.headers["cache-control"] == "no-cache"
    assert "script-src 'self'" in reply.headers["content-security-policy"]
    assert reply.headers["x-content-type-options"] == "nosniff"
    # Relative references, so a stage prefix or the signing proxy serves the same page.
    assert 'src="dashboard/app.js"' in reply.text and 'type="module"' in reply.text


def test_every_file_the_page_references_is_served_with_its_type(api: ApiClient) -> None:
    page = api.get("/", caller=None).text
    referenced = set(re.findall(r'(?:src|href)="dashboard/([^"]+)"', page))
    assert {"app.js", "app.css", "uPlot.iife.min.js"} <= referenced
    modules = {"app.js"}
    # Follow the ES module imports, so a renamed module cannot 404 in the browser.
    pending = ["app.js"]
    while pending:
        name = pending.pop()
        body = api.get(f"/dashboard/{name}", caller=None).text
        for found in re.findall(r'from "\./([^"]+)"', body):
            if found not in modules:
                modules.add(found)
                pending.append(found)
    for name in referenced | modules:
        reply = api.get(f"/dashboard/{name}", caller=None)
        assert reply.status == 200, name
        expected = "text/css; charset=utf-8" if name.endswith(".css") else JS
        assert reply.headers["content-type"] == expected, name
        assert reply.headers["etag"] == dashboard.get(name).etag  # type: ignore[union-attr]


def test_the_vendored_chart_library_keeps_its_licence() -> None:
    asset = dashboard.get("uPlot.iife.min.js")
    assert asset is not None
    assert "The MIT License" in asset.body[:2000] and "Leon Sorokin" in asset.body[:2000]


def test_an_unchanged_file_is_answered_304_without_a_body(api: ApiClient) -> None:
    first = api.get("/dashboard/app.js", caller=None)
    again = api.get(
        "/dashboard/app.js", caller=None, headers={"If-None-Match": first.headers["etag"]}
    )
    assert again.status == 304 and again.text == ""
    stale = api.get("/dashboard/app.js", caller=None, headers={"If-None-Match": '"old"'})
    assert stale.status == 200 and stale.text == first.text


@pytest.mark.parametrize("name", ["__init__.py", "missing.js", "..", ".hidden.js", "app"])
def test_nothing_but_the_dashboard_files_is_served(api: ApiClient, name: str) -> None:
    reply = api.get(f"/dashboard/{name}", caller=None)
    assert reply.status == 404
    assert reply.json == {"message": f"no dashboard file {name}"}


def test_capacity_needs_a_user(api: ApiClient) -> None:
    assert api.get("/capacity", caller=None).status == 401


def test_capacity_counts_gpus_demanded_held_and_paid(api: ApiClient) -> None:
    cluster = api.cluster
    config = {
        "entrypoint": "python train.py",
        "resources": {"slots_per_trial": 1},
        "hyperparameters": {"lr": {"type": "categorical", "vals": [1, 2, 3]}},
        "searcher": {"name": "grid", "metric": "loss"},
    }
    assert api.post("/experiments", {"config": config}).status == 201
    before = api.get("/capacity").json
    assert before["gpus_demanded"] == 3 and before["gpus_busy"] == 0 and before["gpus_paid"] == 0

    cluster.pump()
    cluster.clock.advance(60)
    for cloud_id in cluster.running_cloud_ids():
        assert api.register(cloud_id).status == 200
    cluster.pump()
    after = api.get("/capacity").json
    trials = cluster.store.trials()
    held = sum(t.slots for t in trials if t.state in (TrialState.ASSIGNED, TrialState.RUNNING))
    paid = sum(i.slots for i in cluster.store.instances() if i.cloud_id is not None)
    assert after["gpus_demanded"] == 3
    assert after["gpus_busy"] == held > 0
    assert after["gpus_paid"] == paid > 0
    (pool,) = after["pools"]
    assert (pool["gpus_demanded"], pool["gpus_busy"], pool["gpus_paid"]) == (3, held, paid)
    assert after["at"] == cluster.clock.now()


def test_every_dashboard_file_ships_as_package_data() -> None:
    # Without a package-data pattern a wheel (and so a Chalice or pip-built deployment)
    # would ship the route but not the page.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["corral"]
    assert dashboard.names()
    for name in dashboard.names():
        path = f"api/dashboard/{name}"
        assert any(fnmatch.fnmatch(path, p) for p in patterns), path


def test_stopped_instances_of_a_warm_pool_are_not_counted_as_paid_gpus() -> None:
    # A stopped instance bills its disks, not its GPUs: the capacity chart's "paid" line
    # drops when an idle agent goes to the warm pool.
    cluster = cluster_with()
    parked = park_one(cluster)
    assert parked.state is InstanceState.STOPPED
    after = ApiClient(cluster).get("/capacity").json
    assert after["gpus_paid"] == 0
    assert [p["instances_paid"] for p in after["pools"]] == [0]
