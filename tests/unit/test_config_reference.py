"""The configuration reference in docs/configuration.md is generated from the config models:
current, complete (every field of every model), and every field has a meaning."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import AfterValidator, Field
from typer.testing import CliRunner

from corral.cli.main import app
from corral.domain.config import reference
from corral.domain.config.common import FrozenModel, OneOrMany, StrList, unique
from corral.domain.config.durations import Duration

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"


def test_the_reference_in_the_docs_is_current() -> None:
    diff = reference.stale_diff(DOC.read_text(encoding="utf-8"))
    assert not diff, f"docs/configuration.md is stale; run {reference.REFRESH_COMMAND}\n{diff}"


def test_every_field_of_every_config_model_is_in_the_reference() -> None:
    missing = reference.all_fields() - reference.rendered_fields()
    assert not missing, sorted(f"{m.__name__}.{name}" for m, name in missing)


def test_every_field_says_what_it_means() -> None:
    assert reference.undocumented() == [], "add a docstring under each of these fields"


class _Inner(FrozenModel):
    depth: int = Field(default=3, ge=1, le=9)
    """How deep."""


class _Toy(FrozenModel):
    kind: Literal["a", "b"]
    """Which one."""
    wait: Duration = 90.0
    """How long to wait | or not."""
    names: Annotated[StrList, Field(min_length=1), AfterValidator(unique)] = ("x",)
    """Names, in order."""
    inner: _Inner = _Inner()
    """Nested settings."""
    items: Annotated[tuple[_Inner, ...], OneOrMany] = ()
    described: str = Field(default="", description="From the description.")


def test_a_row_shows_path_type_default_rule_and_meaning() -> None:
    table = reference.render_section(reference.Section("toy", (reference.Part(_Toy, "top."),)))
    rows = table.splitlines()[2:]
    assert rows == [
        "| `top.kind` | `a` / `b` | required |  | Which one. |",
        "| `top.wait` | duration | `1m30s` |  | How long to wait \\| or not. |",
        "| `top.names` | string or list of strings | `[x]` | at least 1 item; not empty; "
        "no repeats | Names, in order. |",
        "| `top.inner` | mapping | (fields below) |  | Nested settings. |",
        "| `top.inner.depth` | integer | `3` | >= 1; <= 9 | How deep. |",
        "| `top.items` | mapping or list of mappings | `[]` |  |  |",
        "| `top.items[].depth` | integer | `3` | >= 1; <= 9 | How deep. |",
        '| `top.described` | string | `""` |  | From the description. |',
    ]


DOC_TEXT = """# Title

Prose kept.

<!-- BEGIN GENERATED: config reference only -->
old table
<!-- END GENERATED: config reference only -->

More prose.
"""


def test_update_replaces_only_the_generated_block() -> None:
    updated = reference.update_document(DOC_TEXT, {"only": "| new |"})
    assert updated == DOC_TEXT.replace("old table", "| new |")


def test_a_document_without_the_markers_is_refused() -> None:
    with pytest.raises(reference.StaleMarkers, match="config reference missing"):
        reference.update_document(DOC_TEXT, {"missing": "| new |"})


def test_cli_check_fails_on_a_stale_copy_and_update_refreshes_it(tmp_path: Path) -> None:
    copy = tmp_path / "configuration.md"
    copy.write_text(
        DOC.read_text(encoding="utf-8").replace("| `resource_pools` |", "| `pools` |", 1),
        encoding="utf-8",
    )
    runner = CliRunner()
    stale = runner.invoke(app, ["config", "reference", "--check", str(copy)])
    assert stale.exit_code == 1
    assert "-| `pools` |" in stale.stdout and "+| `resource_pools` |" in stale.stdout
    assert "config reference --update docs/configuration.md" in stale.stderr

    updated = runner.invoke(app, ["config", "reference", "--update", str(copy)])
    assert updated.exit_code == 0, updated.output
    assert copy.read_text(encoding="utf-8") == DOC.read_text(encoding="utf-8")
    current = runner.invoke(app, ["config", "reference", "--check", str(copy)])
    assert current.exit_code == 0 and "current" in current.stdout


def test_cli_update_leaves_a_file_without_markers_untouched(tmp_path: Path) -> None:
    other = tmp_path / "other.md"
    other.write_text("# no markers\n", encoding="utf-8")
    done = CliRunner().invoke(app, ["config", "reference", "--update", str(other)])
    assert done.exit_code == 2
    assert "needs exactly one block" in done.stderr
    assert other.read_text(encoding="utf-8") == "# no markers\n"
