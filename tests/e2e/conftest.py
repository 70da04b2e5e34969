"""The whole system as separate processes, per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.stack import LocalStack


@pytest.fixture
def stack() -> Iterator[LocalStack]:
    with LocalStack(profile="fast") as running:
        yield running
