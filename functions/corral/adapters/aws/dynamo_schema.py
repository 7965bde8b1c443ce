"""The DynamoDB tables: the one source of truth for key schemas and indexes.

``table_definitions(prefix)`` returns ``create_table`` keyword arguments. The tests, the
local stack and the check of ``infra/template.yaml`` all read them from here. Why the tables
look like this is in ``docs/storage.md``.
"""

from __future__ import annotations

import os
from typing import Any

DEFAULT_PREFIX = "corral-"
PREFIX_ENV = "CORRAL_TABLE_PREFIX"

# Table kinds (the name is ``prefix + kind``).
INSTANCES = "instances"
TRIALS = "trials"
EXPERIMENTS = "experiments"
POOLS = "pools"
HEARTBEATS = "heartbeats"
EVENTS = "events"
LOGS = "logs"
KINDS = (INSTANCES, TRIALS, EXPERIMENTS, POOLS, HEARTBEATS, EVENTS, LOGS)

# Index names.
BY_STATE = "by-state"  # instances, trials: state (HASH) + pool (RANGE)
BY_CLOUD_ID = "by-cloud-id"  # instances: cloud_id (HASH), sparse, keys only
BY_EXPERIMENT = "by-experiment"  # trials: experiment_id (HASH) + state (RANGE)
NEWEST = "newest"  # experiments: listing (HASH, constant) + listed_at (RANGE)
BY_POOL = "by-pool"  # events: pool (HASH, sparse) + event_key (RANGE)

# Attributes the store adds next to a record's own fields (never decoded into records).
LISTING = "listing"  # experiments: one constant value, so "newest first" is one Query
LISTING_VALUE = "experiments"
LISTED_AT = "listed_at"  # experiments: sortable(submitted_at) + "#" + id
STREAM = "stream"  # events: one constant value (see docs/storage.md for the headroom)
STREAM_VALUE = "events"
EVENT_KEY = "event_key"  # events: sortable(at) + "#" + a unique, append-ordered suffix
TTL_ATTRIBUTE = "expires_at"  # housekeeping only: heartbeats, events, logs
TTL_KINDS = (HEARTBEATS, EVENTS, LOGS)
# The range key of each index the store filters on with an equality.
INDEX_RANGE_KEY = {BY_STATE: "pool", BY_EXPERIMENT: "state"}

# The key attribute(s) of each table, in (HASH, RANGE) order.
KEYS: dict[str, tuple[str, ...]] = {
    INSTANCES: ("id",),
    TRIALS: ("id",),
    EXPERIMENTS: ("id",),
    POOLS: ("pool",),
    HEARTBEATS: ("instance_id",),
    EVENTS: (STREAM, EVENT_KEY),
    LOGS: ("trial_id", "seq"),
}


def table_prefix(prefix: str | None = None) -> str:
    """The explicit prefix, else ``$CORRAL_TABLE_PREFIX``, else ``corral-``."""
    if prefix is not None:
        return prefix
    return os.environ.get(PREFIX_ENV, DEFAULT_PREFIX)


def table_name(prefix: str, kind: str) -> str:
    return f"{prefix}{kind}"


def _key_schema(hash_key: str, range_key: str | None = None) -> list[dict[str, str]]:
    schema = [{"AttributeName": hash_key, "KeyType": "HASH"}]
    if range_key is not None:
        schema.append({"AttributeName": range_key, "KeyType": "RANGE"})
    return schema


def _index(
    name: str, hash_key: str, range_key: str | None = None, projection: str = "ALL"
) -> dict[str, Any]:
    return {
        "IndexName": name,
        "KeySchema": _key_schema(hash_key, range_key),
        "Projection": {"ProjectionType": projection},
    }


def _table(
    name: str,
    keys: tuple[str, ...],
    types: dict[str, str],
    indexes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    definition: dict[str, Any] = {
        "TableName": name,
        "KeySchema": _key_schema(*keys),
        "AttributeDefinitions": [
            {"AttributeName": attr, "AttributeType": kind} for attr, kind in sorted(types.items())
        ],
        # On-demand: the load is bursty (a submit writes thousands of trials, then quiet).
        "BillingMode": "PAY_PER_REQUEST",
    }
    if indexes:
        definition["GlobalSecondaryIndexes"] = indexes
    return definition


def table_definitions(prefix: str | None = None) -> list[dict[str, Any]]:
    """``create_table`` kwargs for every table, in ``KINDS`` order."""
    p = table_prefix(prefix)
    return [
        _table(
            table_name(p, INSTANCES),
            KEYS[INSTANCES],
            {"id": "S", "state": "S", "pool": "S", "cloud_id": "S"},
            [
                _index(BY_STATE, "state", "pool"),
                # Keys only: the store re-reads the record with a consistent GetItem.
                _index(BY_CLOUD_ID, "cloud_id", projection="KEYS_ONLY"),
            ],
        ),
        _table(
            table_name(p, TRIALS),
            KEYS[TRIALS],
            {"id": "S", "state": "S", "pool": "S", "experiment_id": "S"},
            [_index(BY_STATE, "state", "pool"), _index(BY_EXPERIMENT, "experiment_id", "state")],
        ),
        _table(
            table_name(p, EXPERIMENTS),
            KEYS[EXPERIMENTS],
            {"id": "S", LISTING: "S", LISTED_AT: "S"},
            [_index(NEWEST, LISTING, LISTED_AT)],
        ),
        _table(table_name(p, POOLS), KEYS[POOLS], {"pool": "S"}),
        _table(table_name(p, HEARTBEATS), KEYS[HEARTBEATS], {"instance_id": "S"}),
        _table(
            table_name(p, EVENTS),
            KEYS[EVENTS],
            {STREAM: "S", EVENT_KEY: "S", "pool": "S"},
            [_index(BY_POOL, "pool", EVENT_KEY)],
        ),
        _table(table_name(p, LOGS), KEYS[LOGS], {"trial_id": "S", "seq": "N"}),
    ]


def ttl_specifications(prefix: str | None = None) -> list[dict[str, Any]]:
    """``update_time_to_live`` kwargs: TTL deletes old observations, never anything the
    control plane's correctness depends on (and moto never deletes at all)."""
    p = table_prefix(prefix)
    return [
        {
            "TableName": table_name(p, kind),
            "TimeToLiveSpecification": {"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        }
        for kind in TTL_KINDS
    ]


def create_tables(client: Any, prefix: str | None = None) -> list[str]:
    """Create every missing table (and its TTL setting); return the names created.

    For tests and the local stack; a deployment creates them from the template.
    """
    existing: set[str] = set()
    for page in client.get_paginator("list_tables").paginate():
        existing.update(page.get("TableNames", []))
    created = []
    for definition in table_definitions(prefix):
        if definition["TableName"] not in existing:
            client.create_table(**definition)
            created.append(definition["TableName"])
    for spec in ttl_specifications(prefix):
        if spec["TableName"] in created:
            client.get_waiter("table_exists").wait(TableName=spec["TableName"])
            client.update_time_to_live(**spec)
    return created
