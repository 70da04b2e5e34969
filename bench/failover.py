"""The scheduler's leader killed in the middle of a 1,000-pod burst: nothing planned twice, and how soon the
standby decides.

The same stack as the e2e suite (real nats-server, the sandbox's fast profile, every service its own process),
with two scheduler replicas and a lease of 2 s. The burst is the e2e provisioning mix (``D`` Deployments of
``P`` pods, created at once). As soon as the first ``NodeClaimPlanned`` is in the log, the replica holding the
lease is SIGKILLed, as a crash would. Figures:

* ``pods_planned_twice``: pods named by two claims answering the same batch (target 0: the standby rebuilds
  from the snapshot and the log up to the dead leader's acks, and its own decisions are folded, so a batch the
  dead leader answered is not answered again); ``batches_answered_twice`` likewise; and, for context, pods in
  two claims from *different* batches (a pod offered again because the kube-scheduler packed the new nodes
  differently from the plan: legitimate, and the same without a failover);
* ``kill_to_next_decision_s``: from the kill to the next event the scheduler recorded (the standby's first
  decision), which includes the lease running out;
* ``all_running_s``: from the burst to every pod Running.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from bench.e2e import PodTracker, infrastructure, prepare_stack, read_log, track_pods, varied_deployments
from bench.suite import Suite, Target
from devtools.stack import LocalStack, apply_manifests, connect
from proto import events as ev
from proto import subjects
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.leader import BUCKET

LEASE = "2s"
OTHERS = ("pod-watcher", "launcher-capi", "disruption")


async def _leader(url: str) -> str:
    event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(url,)), provision=False)
    try:
        entry = await (await event_log.key_value(BUCKET)).get("scheduler")
        return entry.value.decode() if entry else ""
    finally:
        await event_log.close()


async def _first_planned(url: str) -> bool:
    event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(url,)), provision=False)
    try:
        return await event_log.last_subject_sequence("tenon.nodeclaim.*.planned") > 0
    finally:
        await event_log.close()


async def _poll(probe: Any, timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("the bench waited too long")
        await asyncio.sleep(interval)


def _twice(events: list[ev.Event]) -> dict[str, int]:
    abandoned = {e.nodeclaim for e in events if isinstance(e, ev.NodeClaimAbandoned)}
    plans = [e for e in events if isinstance(e, ev.NodeClaimPlanned) and e.nodeclaim not in abandoned]
    same_batch = Counter((pod, e.causation_id) for e in plans for pod in e.pods)
    any_batch = Counter(pod for e in plans for pod in e.pods)
    answers = Counter(e.causation_id for e in events if isinstance(e, ev.BatchPlanned))
    return {
        "pods_planned_twice": sum(1 for n in same_batch.values() if n > 1),
        "batches_answered_twice": sum(1 for n in answers.values() if n > 1),
        "pods_in_claims_of_two_batches": sum(1 for n in any_batch.values() if n > 1),
    }


async def measure(stack: LocalStack, deployments: int, replicas: int, timeout: float) -> dict[str, Any]:
    kube, management = await connect(stack)
    tracker = PodTracker()
    watch = asyncio.create_task(track_pods(kube, tracker))
    try:
        await prepare_stack(stack, kube, management, infrastructure(max_size=max(10, deployments * replicas)))
        started = time.time()
        await asyncio.gather(
            *(apply_manifests(kube, management, [d]) for d in varied_deployments(deployments, replicas))
        )
        await _poll(lambda: _first_planned(stack.nats_url), timeout)
        identity = await _leader(stack.nats_url)
        victim = "scheduler#2" if identity.startswith("scheduler-2-") else "scheduler"
        stack.kill(victim)
        killed = time.time()

        async def all_running() -> bool:
            return tracker.running >= deployments * replicas

        await _poll(all_running, timeout, interval=0.2)
        running_at = time.time()
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await kube.close()
        await management.close()
    timed = await read_log(stack.nats_url, (subjects.PENDING, "tenon.nodeclaim.>", subjects.BATCH_DECISIONS))
    after_kill = [t for t in timed if t.event.producer == "scheduler" and t.recorded_at.timestamp() > killed]
    return {
        "pods": deployments * replicas,
        "killed": victim,
        **_twice([t.event for t in timed]),
        "kill_to_next_decision_s": round(min(t.recorded_at.timestamp() for t in after_kill) - killed, 3)
        if after_kill
        else None,
        "all_running_s": round(running_at - started, 2),
        "lease": LEASE,
    }


def run(quick: bool) -> Suite:
    deployments, replicas = (4, 50) if quick else (20, 50)
    extra = {"TENON_LEASE_TTL": LEASE}
    with LocalStack(profile="fast", services=OTHERS, extra_env=extra) as stack:
        stack.start_service("scheduler")
        stack.start_service("scheduler", replica=2)
        data = asyncio.run(measure(stack, deployments, replicas, 600.0))
    suite = Suite(
        title=f"scheduler leader killed during a {data['pods']}-pod burst (lease {LEASE})",
        columns=["measure", "value"],
        data=data,
    )
    suite.rows += [
        ["pods planned twice for one batch", data["pods_planned_twice"]],
        ["batches answered twice", data["batches_answered_twice"]],
        [
            "pods in claims of two batches (offered again: kube-scheduler packed otherwise)",
            data["pods_in_claims_of_two_batches"],
        ],
        ["kill -> the standby's first decision", f"{data['kill_to_next_decision_s']} s"],
        ["burst -> all Running", f"{data['all_running_s']} s"],
    ]
    suite.targets.append(
        Target(
            "every pod planned once for its batch, every batch answered once, across the failover",
            "0 twice",
            f"{data['pods_planned_twice']} pods, {data['batches_answered_twice']} batches",
            data["pods_planned_twice"] == 0 and data["batches_answered_twice"] == 0,
        )
    )
    return suite
