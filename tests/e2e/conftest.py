"""The whole system as separate processes, per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.stack import LocalStack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    with LocalStack(profile="fast", run_dir=tmp_path / "run") as running:
        yield running
