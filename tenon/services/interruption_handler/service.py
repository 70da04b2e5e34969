"""The interruption-handler service: SQS (EventBridge) -> ``InterruptionNotice``.

``tenon run interruption-handler`` (= ``python -m tenon.services.interruption_handler``) runs it as the
leader of its group; it reads the queue named by ``TENON_INTERRUPTION_QUEUE`` (a name, as Karpenter's
``INTERRUPTION_QUEUE``; one queue per cluster).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from proto import registry
from tenon.runtime.aws import AwsServiceSettings
from tenon.runtime.decider import Decider, Executor
from tenon.runtime.service import ServiceContext, ServiceDefinition, decider_work
from tenon.runtime.settings import SettingsError, setting
from tenon.services.interruption_handler.decider import InterruptionDecider
from tenon.services.interruption_handler.executor import InterruptionExecutor
from tenon.services.interruption_handler.sqs import InterruptionQueue


@dataclass(frozen=True)
class InterruptionHandlerSettings(AwsServiceSettings):
    queue: str = setting(
        "TENON_INTERRUPTION_QUEUE", "", "the SQS queue (its name) EventBridge sends interruption events to"
    )
    wait: float = setting(
        "TENON_INTERRUPTION_WAIT", 20.0, "SQS long-poll wait (at most 20 s)", kind="duration", minimum=0
    )
    visibility: int = setting(
        "TENON_INTERRUPTION_VISIBILITY",
        20,
        "seconds a received message stays hidden before it comes back if not deleted",
        kind="int",
        minimum=1,
        maximum=43200,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.queue.strip():
            raise SettingsError("TENON_INTERRUPTION_QUEUE: not set: name the SQS queue to read")
        if self.wait > 20:
            raise SettingsError(f"TENON_INTERRUPTION_WAIT: {self.wait:g}s is more than SQS's 20 s long poll")


def make_decider(settings: InterruptionHandlerSettings) -> InterruptionDecider:
    return InterruptionDecider()


def make_queue(settings: InterruptionHandlerSettings) -> InterruptionQueue:
    return InterruptionQueue(
        settings.queue,
        region=settings.aws_region,
        endpoint_url=settings.aws_endpoint,
        wait=settings.wait,
        visibility=settings.visibility,
        max_messages=10,
    )


async def make_executor(
    ctx: ServiceContext, settings: InterruptionHandlerSettings, decider: Decider[object]
) -> tuple[Executor, Callable[[], Awaitable[None]]]:
    async def close() -> None:
        return None

    return InterruptionExecutor(make_queue(settings)), close


SERVICE = ServiceDefinition(
    name=registry.INTERRUPTION_HANDLER,
    description="Read EC2 interruption events from SQS; publish InterruptionNotice for tenon's instances.",
    settings=InterruptionHandlerSettings,
    work=decider_work(make_decider, make_executor),
    decider=make_decider,
)
