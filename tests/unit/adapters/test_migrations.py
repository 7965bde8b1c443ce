"""Schema versions in both codecs: stamped on write, older records migrated on read by the
steps in order, newer ones refused unless their writer said older readers may read them.

The production schema has no steps yet (every kind is at version 1), so the steps here are
test-only; the steps of a real upgrade get their own tests (docs/upgrades.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import pytest

from corral.adapters import migrations
from corral.adapters.aws import dynamo_codec
from corral.adapters.gcp import firestore_codec
from corral.adapters.migrations import (
    MIN_READER,
    SCHEMA_VERSION,
    Kind,
    NewerSchemaError,
    Schema,
    Step,
    StoredFields,
)
from corral.domain.metrics import MetricKind, MetricSeries, MetricSummary, new_series
from corral.domain.records import Heartbeat, PoolState
from corral.domain.trial import Trial, new_trial

CODECS = {"dynamodb": dynamo_codec, "firestore": firestore_codec}


@pytest.fixture(params=sorted(CODECS))
def codec(request: pytest.FixtureRequest) -> Any:
    return CODECS[request.param]


def trial() -> Trial:
    return replace(
        new_trial("t1", "e1", "gpu", 1, 100.0, hyperparameters={"lr": 0.1}),
        version=4,
        pending_reason="waiting",
    )


def version_of(codec: Any, raw: dict[str, Any]) -> int:
    return int(codec.VALUES.decode(raw[SCHEMA_VERSION], int))


def v1_item(codec: Any, record: Any) -> dict[str, Any]:
    """What the release before versions wrote: the same fields, no stamp."""
    raw = dict(codec.encode_fields(record))
    del raw[SCHEMA_VERSION]
    return raw


# Test-only history of the trial kind: 2 rewrote pending reasons, 3 added an attribute.
def _prefix_reason(fields: StoredFields) -> StoredFields:
    reason = fields.get("pending_reason", str | None, None)
    return fields.with_value("pending_reason", f"v2: {reason}", str | None)


def _add_note(fields: StoredFields) -> StoredFields:
    return fields.with_value("note", "added in 3", str)


def schema_with(*steps: Step) -> Schema:
    """Today's schema, but the trial kind has these steps."""
    others = tuple(k for k in migrations.SCHEMA.kinds if k.cls is not Trial)
    return Schema((Kind("trial", Trial, ("id",), steps), *others))


STEP_2 = Step(1, _prefix_reason, "pending reasons say their version")
STEP_3 = Step(2, _add_note, "a note nobody reads yet", additive=True)


def test_every_stored_kind_is_stamped_with_its_version(codec: Any) -> None:
    series = new_series("t1", "e1", MetricKind.VALIDATION, "loss")
    for record in (trial(), PoolState("gpu"), Heartbeat("i1", 5.0), series):
        raw = codec.encode_fields(record)
        assert version_of(codec, raw) == 1, type(record).__name__
        assert MIN_READER not in raw  # only written when older readers may read it
    # A summary is also read alone (list views): it carries its own stamp inside the series.
    nested = codec.encode_fields(series)["summary"]
    nested = nested["M"] if codec is dynamo_codec else nested
    assert version_of(codec, nested) == 1


def test_records_written_before_versions_read_as_version_1(codec: Any) -> None:
    record = trial()
    assert codec.decode_fields(Trial, v1_item(codec, record)) == record


def test_older_records_run_every_step_from_their_version_in_order(
    codec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = trial()
    v1 = v1_item(codec, record)
    monkeypatch.setattr(migrations, "SCHEMA", schema_with(STEP_2))
    v2 = codec.encode_fields(replace(record, pending_reason="v2: waiting"))
    assert version_of(codec, v2) == 2

    assert codec.decode_fields(Trial, v1).pending_reason == "v2: waiting"
    assert codec.decode_fields(Trial, v2).pending_reason == "v2: waiting"  # not applied twice
    assert SCHEMA_VERSION not in v1  # steps are pure: the stored item is left as it was

    monkeypatch.setattr(migrations, "SCHEMA", schema_with(STEP_2, STEP_3))
    assert codec.decode_fields(Trial, v1).pending_reason == "v2: waiting"
    assert codec.decode_fields(Trial, v1) == codec.decode_fields(Trial, v2)


def test_a_migrated_record_keeps_its_concurrency_version(
    codec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(migrations, "SCHEMA", schema_with(STEP_2))
    migrated = codec.decode_fields(Trial, v1_item(codec, trial()))
    assert migrated.version == 4
    assert version_of(codec, codec.encode_fields(migrated)) == 2  # rewritten as current


def test_a_newer_record_is_refused_naming_it_and_both_versions(
    codec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(migrations, "SCHEMA", schema_with(STEP_2))
    newer = codec.encode_fields(trial())  # written at 2
    monkeypatch.setattr(migrations, "SCHEMA", schema_with())  # rolled back to 1
    with pytest.raises(NewerSchemaError) as refused:
        codec.decode_fields(Trial, newer)
    message = str(refused.value)
    assert "trial t1 has schema version 2" in message
    assert "up to version 1" in message and "docs/upgrades.md" in message


def test_a_newer_record_of_additive_steps_only_is_read_by_older_code(
    codec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(migrations, "SCHEMA", schema_with(STEP_2, STEP_3))
    newer = codec.encode_fields(trial())
    assert version_of(codec, newer) == 3
    assert int(codec.VALUES.decode(newer[MIN_READER], int)) == 2

    monkeypatch.setattr(migrations, "SCHEMA", schema_with(STEP_2))  # one release back
    assert codec.decode_fields(Trial, newer) == trial()  # the unknown "note" is ignored
    monkeypatch.setattr(migrations, "SCHEMA", schema_with())  # two: step 2 was not additive
    with pytest.raises(NewerSchemaError, match="schema version 3"):
        codec.decode_fields(Trial, newer)


def test_a_newer_metric_summary_is_refused_when_read_alone(
    codec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary_kind = migrations.SCHEMA.kind_of(MetricSummary)
    assert summary_kind is not None
    bumped = replace(summary_kind, steps=(Step(1, lambda f: f, "a newer summary"),))
    others = tuple(k for k in migrations.SCHEMA.kinds if k is not summary_kind)
    monkeypatch.setattr(migrations, "SCHEMA", Schema((*others, bumped)))
    raw = codec.encode_fields(new_series("t1", "e1", MetricKind.TRAINING))
    monkeypatch.setattr(migrations, "SCHEMA", Schema((*others, summary_kind)))
    with pytest.raises(NewerSchemaError, match="metric summary t1/training"):
        codec.decode_fields(MetricSeries, raw)


def test_code_from_before_versions_reads_what_this_version_writes(
    codec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollback to the release before versions: its codecs knew no schema (an empty one
    plays them) and decoded fields only, so the stamp is ignored."""
    record = trial()
    written = codec.encode_fields(record)
    monkeypatch.setattr(migrations, "SCHEMA", Schema(()))
    assert codec.decode_fields(Trial, written) == record


def test_steps_must_be_numbered_from_1_without_gaps() -> None:
    with pytest.raises(ValueError, match="in order"):
        Kind("trial", Trial, ("id",), (Step(2, lambda f: f, "skips 1"),))


def test_stored_fields_helpers_never_change_their_input() -> None:
    raw = {"a": {"S": "x"}, "b": {"N": "1"}}
    fields = StoredFields(raw, dynamo_codec.VALUES)
    changed = fields.renamed("a", "c").without("b").with_value("d", 2, int)
    assert changed.raw == {"c": {"S": "x"}, "d": {"N": "2"}}
    assert raw == {"a": {"S": "x"}, "b": {"N": "1"}}
    assert fields.get("missing", int, 7) == 7
    assert fields.renamed("missing", "z") is fields


def test_no_stored_kind_has_a_field_named_like_the_stamp() -> None:
    for kind in migrations.SCHEMA.kinds:
        names = {f.name for f in dataclasses.fields(kind.cls)}
        assert not names & {SCHEMA_VERSION, MIN_READER}, kind.name
        assert set(kind.key) <= names, kind.name
