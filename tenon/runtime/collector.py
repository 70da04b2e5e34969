"""Python's cycle collector: paused while a large, acyclic batch of objects is made, and paced for a service.

A plan, a rebuild or a simulated cluster allocates hundreds of thousands of objects that live on (none of them
in a cycle), and a collection pass every few hundred allocations walks every object made since: measured, a
third of the first scheduler decision's CPU on 50,000 pods and of ``tenon simulate`` on 20,000.

A running service does the same in small steps: every watch event, every record folded makes dicts that live
as long as the object they describe, so the default pace (a pass every 700 net allocations, a full pass every
hundred of those) walks a growing heap again and again for garbage that almost never has cycles (reference
counting frees the rest). :func:`pace_for_service` spaces the passes out.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off inside the block; nested or concurrent pauses leave it as they found it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


SERVICE_THRESHOLDS = (50_000, 50, 50)
"""``gc.set_threshold`` for a service: a young pass every 50,000 net allocations instead of 700, and older
passes 50 times rarer instead of 10. What it costs is the cyclic garbage a pass would have freed sooner, at
most tens of megabytes. Measured on the 1,000-pod bench (``make bench --only e2e``, services and sandbox
paced alike): all Running in 5.07-5.58 s instead of 5.8-6.4 s; the pod-watcher's CPU 1.04-1.30 s instead of
1.36-1.51 s, the scheduler's 1.14-1.37 s instead of 1.54-1.66 s."""


def pace_for_service() -> None:
    """Space the collector's passes out for a long-running service (:data:`SERVICE_THRESHOLDS`)."""
    gc.set_threshold(*SERVICE_THRESHOLDS)
