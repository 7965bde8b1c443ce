"""The local stack the end-to-end tests drive (helpers in local_stack.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.local_stack import running_stack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Path]:
    """A local stack started in its own state dir (yielded), brought down after the test."""
    with running_stack(tmp_path / "dev") as state_dir:
        yield state_dir
