"""How fast the machine is right now: a fixed piece of work, timed beside each suite's figures.

This machine's speed swings a lot from hour to hour: the same code measured all Running in 7.1 s one night
and 2.8 s the next evening, and the sandbox's HTTP writes (code no change touched) at 1,904 and 8,258 a
second. A figure alone cannot say whether a change or the machine moved it, so ``make bench`` times this work
before each suite and prints it with the suite's results (``machine.reference_ms``): compare runs only at
comparable readings, and read a missed target beside its reading (54 ms in that fast evening).

The work is the kind the stack does all the time: Kubernetes-shaped objects encoded to JSON and back, and
walked. Its CPU time is read (``time.process_time``), the best of a few tries, so that a moment of another
process's work does not count; a slow phase of the machine (every process needing more CPU for the same
work) does.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import msgspec

TRIES = 5


def _pods(count: int) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {
                "name": f"web-{i}",
                "namespace": "default",
                "labels": {"app": "web", "pod-template-hash": f"{i % 7:x}"},
                "annotations": {"tenon.sh/batch": str(i // 50)},
            },
            "spec": {
                "nodeName": f"node-{i % 40}",
                "containers": [
                    {"name": "app", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}
                ],
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(count)
    ]


def _work(pods: list[dict[str, Any]]) -> int:
    decoded = msgspec.json.decode(msgspec.json.encode(pods))
    by_node: dict[str, int] = {}
    for pod in decoded:
        node = pod["spec"]["nodeName"]
        by_node[node] = by_node.get(node, 0) + sum(
            1 for c in pod["status"]["conditions"] if c["type"] == "Ready" and c["status"] == "True"
        )
    return sum(by_node.values())


def reference_ms(pods: int = 2_000, rounds: int = 10) -> float:
    """CPU milliseconds for the reference work: the best of :data:`TRIES`."""
    objects = _pods(pods)
    best = float("inf")
    gc.collect()
    gc.disable()  # the collector's passes scale with whatever else the process holds: not the machine's speed
    try:
        for _ in range(TRIES):
            started = time.process_time()
            for _ in range(rounds):
                _work(objects)
            best = min(best, time.process_time() - started)
    finally:
        gc.enable()
    return round(best * 1000, 1)
