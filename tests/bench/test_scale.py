"""The scale run's analysis (``bench/scale.py``) on hand-made inputs: what each wave asks for, when a wave
is done, the per-wave latencies, memory peaks and growth ratios. No stack: the run itself is ``make bench``'s
business (``--only scale``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench.e2e import TimedEvent
from bench.scale import (
    OWNER_LABEL,
    ZONES,
    RssPeaks,
    ScalePodTracker,
    batch_decisions,
    claim_steps,
    convergence,
    count_lines,
    growth,
    over_limit,
    pending_to_running,
    scale_deployments,
    summary,
    wave_plans,
    zonal_infrastructure,
)
from proto.events import Event, InstanceChoice, NodeClaimLaunched, NodeClaimPlanned, PendingBatch
from tenon.core.wellknown import MAX_SIZE

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float, event: Event) -> TimedEvent:
    return TimedEvent(T0 + timedelta(seconds=seconds), event)


def common(event_id: str, causation: str | None = None) -> dict[str, Any]:
    return {"id": event_id, "decided_at": T0, "producer": "test", "causation_id": causation}


def batch(event_id: str) -> PendingBatch:
    return PendingBatch(
        **common(event_id), batch_id=event_id, pods=(), window_opened_at=T0, window_closed_by="idle"
    )


def planned(claim: str, batch_id: str) -> NodeClaimPlanned:
    return NodeClaimPlanned(
        **common(f"planned-{claim}", batch_id),
        nodeclaim=claim,
        nodepool="default",
        node_class="default",
        choice=InstanceChoice("c3-4", None, "on-demand", 0.05),
        fallbacks=(),
        pods=(),
        requirements=(),
        labels={},
    )


def test_waves_scale_up_in_steps_churn_by_halves_then_go_to_zero() -> None:
    names = [f"d{i}" for i in range(10)]
    plans = wave_plans(names, 100)
    assert [p.name for p in plans] == [
        "up-10%",
        "up-40%",
        "up-100%",
        "churn-1",
        "churn-2",
        "churn-3",
        "churn-4",
        "zero",
    ]
    assert [p.pods for p in plans] == [100, 400, 1000, 750, 750, 750, 1000, 0]
    churn_1, churn_2 = plans[3].replicas, plans[4].replicas
    assert {n for n, r in churn_1.items() if r == 50} == set(names[:5])
    assert {n for n, r in churn_2.items() if r == 50} == set(names[5:])  # the first half back up


def test_a_wave_is_done_only_when_every_deployment_has_exactly_its_replicas() -> None:
    wanted = {"a": 50, "b": 100}
    assert convergence({"a": 50, "b": 100}, wanted) == 150
    # totals match, but a still has pods to lose and b pods to gain
    assert convergence({"a": 100, "b": 50}, wanted) < 150
    assert convergence({"a": 50, "b": 100, "gone": 3}, wanted) < 150
    assert convergence({}, {"a": 0}) == 0
    assert convergence({"a": 2}, {"a": 0}) == -2  # scale to zero moves towards the goal


def test_pending_to_running_counts_only_the_wave_pods_and_those_never_running() -> None:
    first_seen = {"early": 1.0, "p1": 10.0, "p2": 11.0, "stuck": 12.0, "late": 30.0}
    running_at = {"early": 2.0, "p1": 10.5, "p2": 14.0, "late": 31.0}
    latencies, never = pending_to_running(first_seen, running_at, since=10.0, until=20.0)
    assert sorted(latencies) == [0.5, 3.0]
    assert never == 1


def test_summary_gives_nearest_rank_percentiles_and_none_for_no_values() -> None:
    figures = summary([float(i) for i in range(1, 101)])
    assert figures == {"count": 100, "p50_s": 50.0, "p99_s": 99.0, "max_s": 100.0}
    assert summary([]) is None


def test_batch_decision_is_the_time_to_the_batchs_last_claim_within_the_wave() -> None:
    events = [
        at(0.0, batch("before")),
        at(0.5, planned("c0", "before")),
        at(10.0, batch("b1")),
        at(10.2, planned("c1", "b1")),
        at(10.9, planned("c2", "b1")),
        at(12.0, batch("fits-existing-nodes")),
        at(13.0, batch("b2")),
        at(13.1, planned("c3", "b2")),
    ]
    latencies, without_claims = batch_decisions(events, T0 + timedelta(seconds=5), T0 + timedelta(seconds=20))
    assert sorted(latencies) == pytest.approx([0.1, 0.9])
    assert without_claims == 1


def test_rss_peaks_are_kept_per_wave_and_overall() -> None:
    peaks = RssPeaks()
    peaks.observe({"scheduler": 100, "sandbox": 300})
    peaks.observe({"scheduler": 200, "sandbox": 250})
    assert peaks.next_wave() == {"scheduler": 200, "sandbox": 300}
    peaks.observe({"scheduler": 150})
    assert peaks.wave == {"scheduler": 150}
    assert peaks.overall == {"scheduler": 200, "sandbox": 300}


def test_over_limit_names_the_services_above_it_but_not_the_excluded() -> None:
    peaks = {"scheduler": 2 << 30, "pod-watcher": 1 << 29, "sandbox": 3 << 30}
    assert over_limit(peaks, 1 << 30, excluded=("sandbox",)) == {"scheduler": 2 << 30}


def test_growth_divides_each_number_both_waves_have() -> None:
    first = {"cpu_seconds": {"scheduler": 2.0, "sandbox": 0.0}, "events_per_s": 100.0, "all": True}
    last = {"cpu_seconds": {"scheduler": 20.0, "sandbox": 5.0, "new": 1.0}, "events_per_s": 150.0}
    assert growth(first, last) == {
        "cpu_seconds.sandbox": None,
        "cpu_seconds.scheduler": 10.0,
        "events_per_s": 1.5,
    }


def test_the_infrastructure_offers_every_type_in_every_zone() -> None:
    documents = zonal_infrastructure(max_size=3000)
    machine_deployments = [d for d in documents if d["kind"] == "MachineDeployment"]
    assert len(machine_deployments) == 3 * len(ZONES)
    assert len({d["metadata"]["name"] for d in machine_deployments}) == len(machine_deployments)
    by_zone: dict[str, set[str]] = {}
    for md in machine_deployments:
        template = md["spec"]["template"]
        assert md["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        instance_type = template["metadata"]["labels"]["node.kubernetes.io/instance-type"]
        by_zone.setdefault(template["spec"]["failureDomain"], set()).add(instance_type)
        assert md["metadata"]["annotations"][MAX_SIZE] == "3000"
    assert by_zone == {zone: {"c3-4", "c3-8", "c3-16"} for zone in ZONES}
    [pool] = [d for d in documents if d["kind"] == "NodePool"]
    assert int(pool["spec"]["limits"]["cpu"]) >= 3000 * 8 * 9
    assert pool["spec"]["disruption"]["consolidateAfter"] == "1h"


def test_deployments_carry_the_benchmark_constraint_mix_and_are_watched() -> None:
    deployments = scale_deployments(10)
    kinds = [d["metadata"]["name"].split("-", 2)[2] for d in deployments]
    assert kinds == ["generic"] * 2 + ["zspread"] * 2 + ["hspread"] * 2 + ["zaffinity"] * 2 + ["hanti"] * 2
    for deployment in deployments:
        template = deployment["spec"]["template"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        assert template["metadata"]["labels"]["bench"] == "e2e"  # what bench.e2e's pod watch follows
    hanti = deployments[-1]["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert (
        hanti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "kubernetes.io/hostname"
    )


def test_the_pod_tracker_remembers_first_seen_and_first_running_per_deployment() -> None:
    tracker = ScalePodTracker()

    def pod(uid: str, phase: str) -> dict[str, Any]:
        return {"metadata": {"uid": uid, "labels": {OWNER_LABEL: "d1"}}, "status": {"phase": phase}}

    tracker.see(pod("u1", "Pending"))
    tracker.see(pod("u2", "Running"))
    tracker.see(pod("u1", "Running"))
    assert tracker.first_seen["u1"] <= tracker.running_at["u1"]
    assert tracker.running_by_deployment() == {"d1": 2}
    tracker.see(pod("u2", "Running"), deleted=True)
    assert tracker.running_by_deployment() == {"d1": 1}


def launched(claim: str, event_id: str) -> NodeClaimLaunched:
    return NodeClaimLaunched(
        **common(event_id), nodeclaim=claim, provider_id=f"p://{claim}", instance_type="c3-4"
    )


def test_claim_steps_count_each_claim_once_per_step() -> None:
    events = [
        at(0, planned("c1", "b")),
        at(1, planned("c2", "b")),
        at(2, launched("c1", "l1")),
        at(3, launched("c1", "l1-again")),  # a step written twice is one claim at that step
    ]
    assert claim_steps(events) == {"NodeClaimLaunched": 1, "NodeClaimPlanned": 2}


def test_count_lines_counts_the_lines_holding_the_text(tmp_path: Path) -> None:
    log = tmp_path / "scheduler.log"
    log.write_text('{"msg": "lost leadership"}\n{"msg": "became leader"}\n{"msg": "lost leadership"}\n')
    assert count_lines(log, '"msg": "lost leadership"') == 2
    assert count_lines(tmp_path / "absent.log", "x") == 0
