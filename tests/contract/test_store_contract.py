"""The Store contract (corral.ports.store), run against every registered store adapter."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.domain.errors import ConflictError
from corral.domain.instance import Instance, InstanceState, new_instance
from corral.domain.offerings import CapacityType, Offering
from corral.domain.records import Event, EventKind, Experiment, Heartbeat, LogLine, PoolState
from corral.domain.trial import Trial, TrialState, new_trial
from corral.ports.store import Record, Store

T0 = 1_700_000_000.0
OFFERING = Offering("g5.xlarge", "subnet-a", CapacityType.ON_DEMAND, 4, 1.006)
IS, TS = InstanceState, TrialState
StoreFactory = Callable[[], AbstractContextManager[Store]]


def instance(
    instance_id: str, pool: str = "gpu", state: InstanceState = IS.QUEUED, **changes: object
) -> Instance:
    made = new_instance(instance_id, pool, OFFERING, T0, "test")
    return replace(made, state=state, **changes)  # type: ignore[arg-type]


def trial(
    trial_id: str, experiment_id: str = "e1", pool: str = "gpu", state: TrialState = TS.PENDING
) -> Trial:
    return replace(new_trial(trial_id, experiment_id, pool, 1, T0), state=state)


def experiment(experiment_id: str, submitted_at: float = T0) -> Experiment:
    return Experiment(experiment_id, f"name-{experiment_id}", "gpu", submitted_at, {}, ("t1",))


def event(at: float, pool: str | None = "gpu", message: str = "") -> Event:
    return Event(at=at, kind=EventKind.TRIAL_STATE, message=message or f"at {at}", pool=pool)


R = TypeVar("R", Instance, Trial, Experiment, PoolState)


def commit_one(store: Store, record: R) -> R:
    """Commit one record and get the stored copy back with its own type."""
    (written,) = store.commit([record])
    assert isinstance(written, type(record))
    return written


def ids(records: list[Instance] | list[Trial] | list[Experiment]) -> list[str]:
    return [r.id for r in records]


# ---- versioned records ----------------------------------------------------------------------


def test_create_then_read_every_kind(store: Store) -> None:
    written = store.commit([instance("i1"), trial("t1"), experiment("e1"), PoolState("gpu")])
    assert [r.version for r in written] == [1, 1, 1, 1]
    assert store.get_instance("i1") == written[0]
    assert store.get_trial("t1") == written[1]
    assert store.get_experiment("e1") == written[2]
    assert store.pool_state("gpu") == written[3]


def test_missing_records_read_as_none(store: Store) -> None:
    assert store.get_instance("nope") is None
    assert store.get_trial("nope") is None
    assert store.get_experiment("nope") is None
    assert store.instance_by_cloud_id("i-nope") is None


def test_creating_twice_conflicts(store: Store) -> None:
    store.commit([instance("i1")])
    with pytest.raises(ConflictError):
        store.commit([instance("i1", state=IS.REQUESTED)])
    stored = store.get_instance("i1")
    assert stored is not None and stored.state is IS.QUEUED and stored.version == 1


def test_versions_increment_on_every_write(store: Store) -> None:
    current = commit_one(store, trial("t1"))
    for expected in (2, 3, 4):
        current = commit_one(store, replace(current, priority=expected))
        assert current.version == expected
    assert store.get_trial("t1") == current


def test_stale_update_conflicts_and_names_the_record(store: Store) -> None:
    v1 = commit_one(store, instance("i-stale"))
    store.commit([replace(v1, state=IS.REQUESTED)])
    with pytest.raises(ConflictError, match="i-stale"):
        store.commit([replace(v1, state=IS.CANCELLED)])
    stored = store.get_instance("i-stale")
    assert stored is not None and stored.state is IS.REQUESTED and stored.version == 2


def test_commit_is_all_or_nothing(store: Store) -> None:
    inst = commit_one(store, instance("i1"))
    store.commit([replace(inst, state=IS.REQUESTED)])  # inst is now stale
    with pytest.raises(ConflictError):
        store.commit([trial("t-new"), replace(inst, state=IS.CANCELLED), PoolState("gpu")])
    assert store.get_trial("t-new") is None
    assert store.pool_state("gpu").version == 0
    assert store.trials() == []


def test_duplicate_keys_in_one_commit_are_refused(store: Store) -> None:
    with pytest.raises(ValueError):
        store.commit([instance("i1"), instance("i1", state=IS.REQUESTED)])
    assert store.get_instance("i1") is None


def test_an_empty_commit_is_harmless(store: Store) -> None:
    assert store.commit([]) == []


def test_instance_queries_filter_by_pool_and_state(store: Store) -> None:
    store.commit(
        [
            instance("a1", pool="a", state=IS.IDLE),
            instance("a2", pool="a", state=IS.BUSY),
            instance("b1", pool="b", state=IS.IDLE),
            instance("b2", pool="b", state=IS.TERMINATED),
        ]
    )
    assert sorted(ids(store.instances())) == ["a1", "a2", "b1", "b2"]
    assert sorted(ids(store.instances(pool="a"))) == ["a1", "a2"]
    assert sorted(ids(store.instances(states={IS.IDLE}))) == ["a1", "b1"]
    assert ids(store.instances(pool="b", states=[IS.IDLE, IS.BUSY])) == ["b1"]
    assert store.instances(pool="c") == []
    assert store.instances(states=set()) == []


def test_queries_follow_state_changes(store: Store) -> None:
    idle = commit_one(store, instance("i1", state=IS.IDLE))
    store.commit([replace(idle, state=IS.BUSY)])
    assert store.instances(states={IS.IDLE}) == []
    assert ids(store.instances(states={IS.BUSY})) == ["i1"]
    pending = commit_one(store, trial("t1"))
    store.commit([replace(pending, state=TS.ASSIGNED)])
    assert store.trials(states={TS.PENDING}) == []
    assert ids(store.trials(states={TS.ASSIGNED})) == ["t1"]


def test_trial_queries_filter_by_state_experiment_and_pool(store: Store) -> None:
    store.commit(
        [
            trial("t1", "e1", "a", TS.PENDING),
            trial("t2", "e1", "b", TS.RUNNING),
            trial("t3", "e2", "a", TS.PENDING),
            trial("t4", "e2", "a", TS.COMPLETED),
        ]
    )
    assert sorted(ids(store.trials(states={TS.PENDING}))) == ["t1", "t3"]
    assert sorted(ids(store.trials(experiment_id="e1"))) == ["t1", "t2"]
    assert sorted(ids(store.trials(pool="a"))) == ["t1", "t3", "t4"]
    assert ids(store.trials(states={TS.PENDING}, experiment_id="e2", pool="a")) == ["t3"]
    assert store.trials(experiment_id="e3") == []


def test_returned_lists_belong_to_the_caller(store: Store) -> None:
    store.commit([instance("i1"), trial("t1")])
    store.instances().clear()
    store.trials().clear()
    assert len(store.instances()) == 1 and len(store.trials()) == 1


def test_instance_by_cloud_id_follows_the_record(store: Store) -> None:
    queued = commit_one(store, instance("i1"))
    assert store.instance_by_cloud_id("i-0abc") is None
    allocated = commit_one(store, replace(queued, state=IS.ALLOCATED, cloud_id="i-0abc"))
    assert store.instance_by_cloud_id("i-0abc") == allocated
    store.commit([replace(allocated, cloud_id="i-0def")])
    assert store.instance_by_cloud_id("i-0abc") is None
    found = store.instance_by_cloud_id("i-0def")
    assert found is not None and found.id == "i1"


def test_experiments_newest_first_with_limit(store: Store) -> None:
    store.commit([experiment(f"e{n}", T0 + n) for n in range(5)])
    assert ids(store.experiments()) == ["e4", "e3", "e2", "e1", "e0"]
    assert ids(store.experiments(limit=2)) == ["e4", "e3"]


def test_pool_state_defaults_then_round_trips(store: Store) -> None:
    fresh = store.pool_state("gpu")
    assert fresh == PoolState("gpu") and fresh.version == 0
    memory = fresh.capacity.marked_unavailable("g5.xlarge|subnet-a|spot", now=T0, ttl_s=180.0)
    changed = replace(
        fresh, capacity=memory, backoff_until=T0 + 60, backoff_reason="VcpuLimitExceeded"
    )
    store.commit([changed])
    stored = store.pool_state("gpu")
    assert stored.version == 1 and stored.backoff_reason == "VcpuLimitExceeded"
    assert not stored.capacity.is_available("g5.xlarge|subnet-a|spot", T0 + 1)
    assert store.pool_state("other") == PoolState("other")


def test_a_read_pool_state_cannot_be_changed_behind_the_stores_back(store: Store) -> None:
    store.commit([PoolState("gpu")])
    read = store.pool_state("gpu")
    marked = read.capacity.marked_unavailable("k", now=T0, ttl_s=60.0)
    assert not marked.is_available("k", T0)
    assert store.pool_state("gpu").capacity.is_available("k", T0)
    with pytest.raises(TypeError):
        marked.unavailable_until["k"] = 0.0  # type: ignore[index]


# ---- observations ---------------------------------------------------------------------------


def test_heartbeats_overwrite_and_never_bump_versions(store: Store) -> None:
    inst = commit_one(store, instance("i1", state=IS.IDLE))
    store.put_heartbeat(Heartbeat("i1", at=T0 + 5))
    store.put_heartbeat(Heartbeat("i1", at=T0 + 10, gpu_utilization=(0.5,)))
    stored = store.get_instance("i1")
    assert stored is not None and stored.version == 1
    busy = commit_one(store, replace(inst, state=IS.BUSY))  # the heartbeat did not make it stale
    assert busy.version == 2
    beats = store.heartbeats(["i1", "i-unknown"])
    assert list(beats) == ["i1"]
    assert beats["i1"].at == T0 + 10 and beats["i1"].gpu_utilization == (0.5,)


def test_heartbeat_for_an_instance_without_record(store: Store) -> None:
    store.put_heartbeat(Heartbeat("i-orphan", at=T0))
    assert store.heartbeats(["i-orphan"])["i-orphan"].at == T0
    assert store.get_instance("i-orphan") is None
    assert store.heartbeats([]) == {}


def test_events_oldest_first_after_since_with_limit_and_pool(store: Store) -> None:
    store.append_events(
        [event(T0 + 1, "a"), event(T0 + 2, "b"), event(T0 + 3, "a"), event(T0 + 4, None)]
    )
    assert [e.at for e in store.events()] == [T0 + 1, T0 + 2, T0 + 3, T0 + 4]
    assert [e.at for e in store.events(since=T0 + 2)] == [T0 + 3, T0 + 4]  # strictly after
    assert [e.at for e in store.events(limit=2)] == [T0 + 1, T0 + 2]
    assert [e.at for e in store.events(pool="a")] == [T0 + 1, T0 + 3]
    assert [e.at for e in store.events(since=T0 + 1, pool="a")] == [T0 + 3]
    assert store.events(since=T0 + 4) == []


def test_events_keep_their_content(store: Store) -> None:
    sent = Event(
        at=T0,
        kind=EventKind.LAUNCH_FAILED,
        message="InsufficientInstanceCapacity",
        pool="gpu",
        instance_id="i1",
        data={"offering": "g5.xlarge|subnet-a|spot"},
    )
    store.append_events([sent])
    assert store.events(since=T0 - 1) == [sent]


def test_logs_dedupe_resent_lines_and_page_by_seq(store: Store) -> None:
    lines = [LogLine("t1", seq, T0 + seq, f"line {seq}") for seq in range(5)]
    store.append_logs(lines[:3])
    store.append_logs(lines[1:])  # an agent resends a batch whose reply was lost
    store.append_logs([LogLine("t2", 0, T0, "other trial")])
    assert store.logs("t1") == lines
    assert [line.seq for line in store.logs("t1", after_seq=1)] == [2, 3, 4]
    assert [line.seq for line in store.logs("t1", after_seq=1, limit=2)] == [2, 3]
    assert store.logs("t1", after_seq=4) == []
    assert store.logs("t-none") == []


def test_logs_come_back_in_seq_order(store: Store) -> None:
    store.append_logs([LogLine("t1", s, T0, f"l{s}") for s in (3, 0, 2, 1)])
    assert [line.seq for line in store.logs("t1")] == [0, 1, 2, 3]


# ---- concurrency ----------------------------------------------------------------------------


def _race(store: Store, base: Record, racers: int) -> tuple[list[int], list[int]]:
    """``racers`` threads commit the same update of ``base`` at once."""
    barrier = threading.Barrier(racers)
    wins: list[int] = []
    losses: list[int] = []

    def racer(n: int) -> None:
        barrier.wait()
        try:
            store.commit([replace(base, version=base.version)])  # same condition for all
            wins.append(n)
        except ConflictError:
            losses.append(n)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return wins, losses


def test_racing_conditional_updates_exactly_one_wins(store: Store) -> None:
    for round_no in range(10):
        base = commit_one(store, instance(f"i{round_no}", state=IS.IDLE))
        wins, losses = _race(store, replace(base, state=IS.BUSY), racers=8)
        assert len(wins) == 1 and len(losses) == 7
        stored = store.get_instance(f"i{round_no}")
        assert stored is not None and stored.version == 2 and stored.state is IS.BUSY


# ---- property: any sequence of commits behaves like a dict of versions ----------------------

INSTANCE_STATES = (IS.QUEUED, IS.IDLE, IS.BUSY)
TRIAL_STATES = (TS.PENDING, TS.RUNNING, TS.FAILED)
write = st.tuples(
    st.sampled_from(("instance", "trial")),
    st.sampled_from(("x", "y", "z")),
    st.sampled_from((0, 0, 0, -1, 1)),  # version offset from the stored one: 0 is fresh
    st.integers(0, 2),  # state index
)
commits = st.lists(
    st.lists(write, min_size=1, max_size=4, unique_by=lambda w: (w[0], w[1])), max_size=10
)
Model = dict[tuple[str, str], tuple[int, int]]  # (kind, id) -> (version, state index)


def _make(kind: str, ident: str, version: int, state_no: int) -> Record:
    if kind == "instance":
        return replace(instance(ident), state=INSTANCE_STATES[state_no], version=version)
    return replace(trial(ident), state=TRIAL_STATES[state_no], version=version)


# 25 examples: each one against moto costs ~100 DynamoDB calls (~0.3 s).
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # the factory is stateless
)
@given(batches=commits)
def test_commits_match_a_model(store_factory: StoreFactory, batches: list[Any]) -> None:
    model: Model = {}
    with store_factory() as store:
        for batch in batches:
            records, fresh = [], True
            for kind, ident, offset, state_no in batch:
                stored_version = model.get((kind, ident), (0, 0))[0]
                version = max(0, stored_version + offset)
                fresh = fresh and version == stored_version
                records.append(_make(kind, ident, version, state_no))
            if fresh:
                written = store.commit(records)
                assert [r.version for r in written] == [r.version + 1 for r in records]
                for kind, ident, _, state_no in batch:
                    model[(kind, ident)] = (model.get((kind, ident), (0, 0))[0] + 1, state_no)
            else:
                with pytest.raises(ConflictError):
                    store.commit(records)
            _check_against_model(store, model)


def _check_against_model(store: Store, model: Model) -> None:
    for (kind, ident), (version, state_no) in model.items():
        got: Instance | Trial | None
        if kind == "instance":
            got = store.get_instance(ident)
            assert got is not None and got.state is INSTANCE_STATES[state_no]
        else:
            got = store.get_trial(ident)
            assert got is not None and got.state is TRIAL_STATES[state_no]
        assert got.version == version

    def expected(kind: str, state_no: int) -> list[str]:
        return sorted(i for (k, i), (_, s) in model.items() if k == kind and s == state_no)

    for state_no, state in enumerate(INSTANCE_STATES):
        assert sorted(ids(store.instances(states={state}))) == expected("instance", state_no)
    for state_no, trial_state in enumerate(TRIAL_STATES):
        assert sorted(ids(store.trials(states={trial_state}))) == expected("trial", state_no)


def test_a_commit_holds_at_most_100_records(store: Store) -> None:
    # DynamoDB's TransactWriteItems limit: every store refuses more, so code that would only
    # ever meet the limit in production fails in tests too.
    with pytest.raises(ValueError, match="100"):
        store.commit([PoolState(f"pool-{n}") for n in range(101)])
    assert store.pool_state("pool-0").version == 0
