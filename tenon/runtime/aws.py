"""AWS access for the services that speak to AWS (launcher-ec2, interruption-handler): their two settings,
the boto3 clients, and one error type for every failed call.

Clients are built for a region and, when ``TENON_AWS_ENDPOINT`` is set, an endpoint URL (the local AWS of
``tenon up --provider ec2`` and the tests; unset in the field, where boto3 picks AWS's endpoint for the
region). Credentials come from boto3's usual chain (IRSA / Pod Identity in a cluster). The SDK retries in
``standard`` mode a few times only: a decision that fails is decided again by the runtime, it need not wait
long inside the SDK. boto3 is imported when a client is made, so a service that never reaches AWS (``tenon
run --help``) does not pay for it.

:func:`call` and :func:`pages` ask one question and return AWS's answer as plain data, or raise
:class:`AwsError` with the operation and AWS's error code (``InsufficientInstanceCapacity``...), or the
exception's name for a connection problem (``EndpointConnectionError``...).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tenon.runtime.observability import metrics
from tenon.runtime.service import CommonSettings
from tenon.runtime.settings import setting

PROVIDER = "aws"
"""Karpenter's ``provider`` label of the cloud provider metrics every call here records (duration, errors)."""
CONNECTION_ERRORS = frozenset(
    {
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ConnectionError",
    }
)
"""Codes of calls that never got an answer (the network, not AWS): worth asking again."""
THROTTLING = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "Unavailable",
    }
)
"""Codes by which AWS says "ask again later" rather than "this cannot be done"."""


@dataclass(frozen=True)
class AwsServiceSettings(CommonSettings):
    """What every service that reaches AWS reads besides the common settings."""

    aws_region: str = setting("TENON_AWS_REGION", "us-east-1", "the AWS region instances are launched in")
    aws_endpoint: str | None = setting(
        "TENON_AWS_ENDPOINT",
        None,
        "EC2/SSM/IAM/SQS endpoint URL (default: AWS's for the region; the local AWS in tests and tenon up)",
    )


class AwsError(RuntimeError):
    """A call that failed: ``call`` is the operation, ``code`` AWS's error code (or the exception's name when
    AWS never answered), ``message`` what it said."""

    def __init__(self, call: str, code: str, message: str) -> None:
        super().__init__(f"{call}: {code}: {message}")
        self.call = call
        self.code = code
        self.message = message

    @property
    def transient(self) -> bool:
        """Whether asking again later may succeed (throttling, AWS's own trouble, no answer at all)."""
        return self.code in THROTTLING or self.code in CONNECTION_ERRORS


def client(
    service: str,
    region: str,
    endpoint_url: str | None = None,
    *,
    read_timeout: float = 30.0,
    attempts: int = 3,
) -> Any:
    """A boto3 client of ``service`` in ``region`` (at ``endpoint_url`` when given; see the module doc)."""
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"max_attempts": attempts, "mode": "standard"},
        connect_timeout=5,
        read_timeout=read_timeout,
    )
    session = boto3.session.Session(region_name=region)
    return session.client(service, endpoint_url=endpoint_url, config=config)


def _error(operation: str, exc: Exception) -> AwsError:
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error") or {}
        return AwsError(operation, str(error.get("Code") or "Unknown"), str(error.get("Message") or ""))
    return AwsError(operation, type(exc).__name__, str(exc))


def _failures() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError, OSError)


def call(aws_client: Any, operation: str, **kwargs: Any) -> Any:
    """``aws_client.<operation>(**kwargs)``; :class:`AwsError` when it fails."""
    started = time.perf_counter()
    try:
        return getattr(aws_client, operation)(**kwargs)
    except _failures() as exc:
        raise _counted(aws_client, operation, _error(operation, exc)) from None
    finally:
        _timed(aws_client, operation, started)


def pages(aws_client: Any, operation: str, key: str, **kwargs: Any) -> list[Any]:
    """Every item under ``key`` of every page of ``operation``; :class:`AwsError` when a page fails."""
    out: list[Any] = []
    started = time.perf_counter()
    try:
        for page in aws_client.get_paginator(operation).paginate(**kwargs):
            out.extend(page.get(key) or [])
    except _failures() as exc:
        raise _counted(aws_client, operation, _error(operation, exc)) from None
    finally:
        _timed(aws_client, operation, started)
    return out


def _service_of(aws_client: Any) -> str:
    """The AWS service a client speaks to (``ec2``, ``sqs``): Karpenter's ``controller`` label here."""
    model = getattr(getattr(aws_client, "meta", None), "service_model", None)
    return str(getattr(model, "service_name", "") or "")


def _timed(aws_client: Any, operation: str, started: float) -> None:
    metrics.CLOUDPROVIDER_DURATION.labels(
        controller=_service_of(aws_client), method=operation, provider=PROVIDER
    ).observe(time.perf_counter() - started)


def _counted(aws_client: Any, operation: str, error: AwsError) -> AwsError:
    metrics.CLOUDPROVIDER_ERRORS.labels(
        controller=_service_of(aws_client), method=operation, provider=PROVIDER, error=error.code
    ).inc()
    return error


def tag_list(tags: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    """``[{"Key": k, "Value": v}]`` sorted by key, as EC2's TagSpecifications take them."""
    return [{"Key": k, "Value": v} for k, v in sorted(tags)]
