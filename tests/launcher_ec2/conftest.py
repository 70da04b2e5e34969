"""The local AWS every launcher-ec2 test runs against."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from devtools.aws import LocalAws, Seeded, aws_environment, client, seed
from tests.launcher_ec2.ec2_support import CLUSTER


@pytest.fixture
def local_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalAws, Seeded]]:
    """The local AWS on a free loopback port, seeded like a cluster's account, with the process's AWS
    environment pointing at it (and nowhere else)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with LocalAws() as aws:
        aws.reset()
        for key, value in aws_environment(aws.url).items():
            monkeypatch.setenv(key, value)
        seeded = seed(aws.url, CLUSTER)
        iam = client("iam", aws.url)
        iam.create_instance_profile(InstanceProfileName="KarpenterNodeInstanceProfile")
        yield aws, seeded
