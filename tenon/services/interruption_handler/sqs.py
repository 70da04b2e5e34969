"""The interruption queue (boto3 SQS; blocking calls run in daemon threads so a long poll never holds up a
shutdown).

Karpenter's loop (``pkg/providers/sqs``): ReceiveMessage with at most 10 messages, a 20 s long poll and a
20 s visibility timeout, asking for ``SentTimestamp`` and ``ApproximateReceiveCount``; a message is deleted
once handled, and comes back after the visibility timeout when it was not.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from tenon.runtime import aws
from tenon.runtime.aws import AwsError

T = TypeVar("T")


QueueError = AwsError
"""A queue call that failed (:class:`tenon.runtime.aws.AwsError`: the operation, AWS's code, its message)."""


@dataclass(frozen=True)
class Received:
    message_id: str
    receipt: str
    body: str
    sent_at: datetime | None
    receive_count: int


def in_daemon_thread(call: Callable[[], T]) -> asyncio.Future[T]:
    """``call()`` in a daemon thread: cancelling the future abandons it (a 20 s long poll then ends on its
    own) instead of holding up the loop's shutdown as ``asyncio.to_thread`` would."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(setter: Callable[[Any], None], value: Any) -> None:
        if not future.done():
            setter(value)

    def run() -> None:
        try:
            result = call()
        except BaseException as exc:  # handed to the awaiting task, whatever it is
            outcome: tuple[Callable[[Any], None], Any] = (future.set_exception, exc)
        else:
            outcome = (future.set_result, result)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    threading.Thread(target=run, name="sqs", daemon=True).start()
    return future


class InterruptionQueue:
    def __init__(
        self,
        name: str,
        *,
        region: str,
        endpoint_url: str | None,
        wait: float,
        visibility: int,
        max_messages: int,
    ) -> None:
        self.client = aws.client("sqs", region, endpoint_url, read_timeout=wait + 10)
        self.name = name
        self.wait = wait
        self.visibility = visibility
        self.max_messages = max_messages
        self.url: str | None = None

    def _call(self, operation: str, **kwargs: Any) -> Any:
        return aws.call(self.client, operation, **kwargs)

    def resolve(self) -> str:
        """The queue's URL (GetQueueUrl by name, as Karpenter's ``INTERRUPTION_QUEUE`` is a name)."""
        self.url = str(self._call("get_queue_url", QueueName=self.name)["QueueUrl"])
        return self.url

    def receive(self) -> list[Received]:
        assert self.url is not None
        answer = self._call(
            "receive_message",
            QueueUrl=self.url,
            MaxNumberOfMessages=self.max_messages,
            WaitTimeSeconds=int(self.wait),
            VisibilityTimeout=self.visibility,
            MessageSystemAttributeNames=["SentTimestamp", "ApproximateReceiveCount"],
        )
        return [_received(m) for m in answer.get("Messages") or []]

    def delete(self, receipt: str) -> None:
        assert self.url is not None
        self._call("delete_message", QueueUrl=self.url, ReceiptHandle=receipt)


def _received(message: dict[str, Any]) -> Received:
    attributes = message.get("Attributes") or {}
    sent = attributes.get("SentTimestamp")
    try:
        sent_at = datetime.fromtimestamp(int(sent) / 1000, UTC) if sent else None
    except ValueError:
        sent_at = None
    try:
        count = int(attributes.get("ApproximateReceiveCount") or 1)
    except ValueError:
        count = 1
    return Received(
        str(message.get("MessageId") or ""),
        str(message.get("ReceiptHandle") or ""),
        str(message.get("Body") or ""),
        sent_at,
        count,
    )
