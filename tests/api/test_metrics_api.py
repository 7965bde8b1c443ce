"""Trial metrics over HTTP: points shipped with a heartbeat, a trial's points page by page,
an experiment's learning curves, and the best trial in experiment and trial views."""

from __future__ import annotations

from collections.abc import Callable

from corral.domain.metrics import IncomingPoint, MetricKind, merge, new_series
from tests.services.harness import Cluster

from .conftest import ApiClient
from .events import agent_arn

GRID = {
    "name": "grid",
    "entrypoint": ["python", "train.py"],
    "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.01, 0.001]}},
    "searcher": {"name": "grid", "metric": "loss", "smaller_is_better": True},
}


def submit(api: ApiClient, config: dict[str, object] = GRID) -> tuple[str, list[str]]:
    reply = api.post("/experiments", {"config": config})
    assert reply.status == 201, reply.text
    return reply.json["id"], [t["id"] for t in reply.json["trials"]]


def report(
    cluster: Cluster,
    trial_id: str,
    values: list[dict[str, float]],
    kind: MetricKind = MetricKind.VALIDATION,
    metric: str | None = "loss",
    smaller: bool = True,
) -> None:
    """Hand-made metrics, stored as the heartbeat path stores them."""
    series = cluster.store.metric_series(trial_id, kind) or new_series(
        trial_id, "e", kind, metric, smaller
    )
    start = series.last_seq + 1
    points = [
        IncomingPoint(seq=start + n, batches=100 * (start + n + 1), values=v, at=1.7e9 + n)
        for n, v in enumerate(values)
    ]
    cluster.store.put_metric_series(merge(series, points).series)


def test_a_trials_points_come_in_pages(api: ApiClient, cluster: Cluster) -> None:
    _, (t0, *_) = submit(api)
    report(cluster, t0, [{"loss": 1.0 / (n + 1), "acc": n / 10} for n in range(7)])
    seen, after, pages = [], -1, 0
    while after is not None:
        reply = api.get(f"/trials/{t0}/metrics", query={"after_seq": after, "limit": 3})
        assert reply.status == 200, reply.text
        page = reply.json
        assert page["trial_id"] == t0 and page["kind"] == "validation"
        seen += page["points"]
        after, pages = page["next_after_seq"], pages + 1
    assert pages == 3  # 3 + 3 + 1, the last one says there is no more
    assert [p["seq"] for p in seen] == list(range(7))
    assert seen[0]["values"] == {"loss": 1.0, "acc": 0.0} and seen[0]["batches"] == 100
    assert seen[0]["reported_at"] == "2023-11-14T22:13:20+00:00"
    full = api.get(f"/trials/{t0}/metrics", query={"limit": 7}).json
    assert len(full["points"]) == 7 and full["next_after_seq"] is None
    training = api.get(f"/trials/{t0}/metrics", query={"kind": "training"}).json
    assert training["points"] == [] and training["next_after_seq"] is None


def test_bad_metric_queries_name_the_parameter(api: ApiClient) -> None:
    experiment_id, (t0, *_) = submit(api)
    assert api.get("/trials/nope/metrics").status == 404
    assert api.get("/experiments/nope/metrics").status == 404
    for path, query in (
        (f"/trials/{t0}/metrics", {"kind": "test"}),
        (f"/trials/{t0}/metrics", {"limit": 1001}),
        (f"/experiments/{experiment_id}/metrics", {"kind": "loss"}),
    ):
        reply = api.get(path, query=query)
        assert reply.status == 422, reply.text
        assert next(iter(query)) in reply.text


def test_the_experiments_curves_and_best_trial(api: ApiClient, cluster: Cluster) -> None:
    experiment_id, (t0, t1, t2) = submit(api)
    report(cluster, t0, [{"loss": 0.5}, {"loss": 0.3}])
    report(cluster, t1, [{"loss": 0.4}, {"loss": 0.2}, {"loss": 0.25}])
    report(cluster, t2, [{"acc": 0.9}])  # never reports the searcher's metric
    report(cluster, t2, [{"loss": 9.0}], kind=MetricKind.TRAINING)

    chart = api.get(f"/experiments/{experiment_id}/metrics").json
    assert chart == {
        "experiment_id": experiment_id,
        "metric": "loss",
        "kind": "validation",
        "smaller_is_better": True,
        "series": [
            {"trial_id": t0, "points": [[100, 0.5], [200, 0.3]]},
            {"trial_id": t1, "points": [[100, 0.4], [200, 0.2], [300, 0.25]]},
        ],
        "truncated": False,
    }
    acc = api.get(f"/experiments/{experiment_id}/metrics", query={"name": "acc"}).json
    assert [s["trial_id"] for s in acc["series"]] == [t2]
    train = api.get(f"/experiments/{experiment_id}/metrics", query={"kind": "training"}).json
    assert train["series"] == [{"trial_id": t2, "points": [[100, 9.0]]}]

    best = {"trial_id": t1, "metric": "loss", "value": 0.2}
    assert api.get(f"/experiments/{experiment_id}").json["best"] == best
    (listed,) = api.get("/experiments").json["experiments"]
    assert listed["best"] == best
    trials = {t["id"]: t for t in api.get(f"/experiments/{experiment_id}/trials").json["trials"]}
    assert trials[t1]["best_value"] == 0.2 and trials[t2]["best_value"] is None
    assert trials[t2]["latest_metrics"] == {"training": {"loss": 9.0}, "validation": {"acc": 0.9}}
    one = api.get(f"/trials/{t1}").json
    assert one["latest_metrics"] == {"training": None, "validation": {"loss": 0.25}}
    assert one["best_value"] == 0.2


def test_larger_is_better_and_no_searcher_metric(api: ApiClient, cluster: Cluster) -> None:
    config = {**GRID, "searcher": {"name": "grid", "metric": "acc", "smaller_is_better": False}}
    experiment_id, (t0, t1, _) = submit(api, config)
    report(cluster, t0, [{"acc": 0.7}], metric="acc", smaller=False)
    report(cluster, t1, [{"acc": 0.8}, {"acc": 0.6}], metric="acc", smaller=False)
    assert api.get(f"/experiments/{experiment_id}").json["best"] == {
        "trial_id": t1,
        "metric": "acc",
        "value": 0.8,
    }
    plain, (p0, *_) = submit(api, {**GRID, "searcher": {"name": "grid"}})
    report(cluster, p0, [{"val_loss": 0.1}], metric=None)
    assert api.get(f"/experiments/{plain}").json["best"] is None
    chart = api.get(f"/experiments/{plain}/metrics").json  # no metric named: the first one
    assert chart["metric"] == "val_loss" and len(chart["series"]) == 1


def test_points_shipped_twice_with_heartbeats_are_stored_once(
    api: ApiClient, cluster: Cluster, running_agent: Callable[[], tuple[str, str]]
) -> None:
    cloud_id, agent_id = running_agent()
    cluster.pump()  # the registration woke the scheduler: the trial is assigned
    reply = api.post(f"/agents/{agent_id}/heartbeat", {}, caller=agent_arn(cloud_id))
    (start,) = reply.json["start"]
    trial_id = start["trial_id"]
    body = {
        "trials": [{"trial_id": trial_id, "state": "running"}],
        "metrics": [
            {
                "trial_id": trial_id,
                "points": [
                    {
                        "seq": 10,
                        "kind": "validation",
                        "batches": 5,
                        "values": {"loss": 2.0},
                        "at": 1,
                    },
                    {"seq": 11, "kind": "training", "batches": 6, "values": {"loss": 1.5}, "at": 2},
                ],
            }
        ],
    }
    for _ in range(2):  # the first reply was lost: the agent sends the same points again
        reply = api.post(f"/agents/{agent_id}/heartbeat", body, caller=agent_arn(cloud_id))
        assert reply.status == 200, reply.text
        assert reply.json["metrics_retry"] == []
    page = api.get(f"/trials/{trial_id}/metrics").json
    assert [(p["seq"], p["values"]) for p in page["points"]] == [(10, {"loss": 2.0})]
    view = api.get(f"/trials/{trial_id}").json
    assert view["latest_metrics"] == {"training": {"loss": 1.5}, "validation": {"loss": 2.0}}
