"""The local AWS (its SQS) every interruption-handler test reads from."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from devtools.aws import LocalAws, Seeded, aws_environment, seed

CLUSTER = "tenon-test"
QUEUE = "tenon-test-interruption"


@pytest.fixture
def local_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalAws, Seeded]]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with LocalAws() as aws:
        aws.reset()
        for key, value in aws_environment(aws.url).items():
            monkeypatch.setenv(key, value)
        yield aws, seed(aws.url, CLUSTER, QUEUE)
