"""The simulated kube-scheduler's decisions (pure: ClusterState + choose_node), and the timing profiles."""

from __future__ import annotations

import math
from typing import Any

import pytest

from devtools.sandbox.controllers.cluster_state import ClusterState
from devtools.sandbox.controllers.predicates import pod_requests, tolerates
from devtools.sandbox.controllers.resource_lists import InvalidResources, resource_list
from devtools.sandbox.controllers.scheduling_filters import NO_NODES_MESSAGE, Decision, choose_node
from devtools.sandbox.profiles import get_profile
from tests.sandbox.controller_support import node, pod


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    obj["status"]["allocatable"] = dict(obj["status"]["capacity"])
    return obj


def cluster(*nodes: dict[str, Any], pods: tuple[dict[str, Any], ...] = ()) -> ClusterState:
    state = ClusterState()
    for item in nodes:
        state.upsert_node(ready(item))
    for item in pods:
        state.upsert_pod(item)
    return state


def decide(state: ClusterState, candidate: dict[str, Any]) -> Decision:
    return choose_node(candidate, pod_requests(candidate), state)


def bound(name: str, node_name: str, **kwargs: Any) -> dict[str, Any]:
    item = pod(name, **kwargs)
    item["spec"]["nodeName"] = node_name
    return item


# ---------------------------------------------------------------------------------------------- requests
def test_resource_lists_parse_exactly_and_name_the_field_of_garbage() -> None:
    parsed = resource_list({"cpu": "1.5", "memory": "2Gi", "ephemeral-storage": "1e3", "pods": 3}, "x")
    assert parsed == {"cpu": 1500, "memory": 2 * 2**30, "ephemeral-storage": 1000, "pods": 3}
    assert resource_list({"cpu": "100m", "memory": "500M"}, "x") == {"cpu": 100, "memory": 500_000_000}
    with pytest.raises(InvalidResources, match=r'requests\[cpu\]: quantity "lots": not a number'):
        resource_list({"cpu": "lots"}, "requests")
    with pytest.raises(InvalidResources, match=r'requests\[cpu\]: quantity "1e5000": too large'):
        resource_list({"cpu": "1e5000"}, "requests")


def test_pod_requests_take_init_container_max_sidecars_and_overhead() -> None:
    item = pod("p", cpu="200m", memory="100Mi")
    item["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
        {"name": "migrate", "resources": {"requests": {"cpu": "1", "memory": "50Mi"}}},
    ]
    item["spec"]["overhead"] = {"cpu": "50m"}
    requests = pod_requests(item)
    # regular 200m + sidecar 100m = 300m; init container 1000m + the sidecar before it = 1100m wins; + 50m
    assert requests["cpu"] == 1150
    assert requests["memory"] == 100 * 2**20


def test_bad_request_names_the_pod_and_field() -> None:
    item = pod("web-1", cpu="lots")
    with pytest.raises(
        InvalidResources, match=r"pod default/web-1: spec.containers\[0\].resources.requests\[cpu\]"
    ):
        pod_requests(item)


def test_toleration_matching_rules() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates({"key": "k", "operator": "Equal", "value": "v"}, taint)
    assert not tolerates({"key": "k", "operator": "Equal", "value": "w"}, taint)
    assert tolerates({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, taint)
    assert not tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert tolerates({"operator": "Exists"}, taint)


# ------------------------------------------------------------------------------------------ the filters
def test_no_nodes_gives_the_real_schedulers_message() -> None:
    decision = decide(ClusterState(), pod("p"))
    assert not decision.scheduled
    assert decision.message == NO_NODES_MESSAGE


def test_insufficient_cpu_message_counts_nodes() -> None:
    state = cluster(node("a", cpu="1"), node("b", cpu="1"), node("c", cpu="1"))
    decision = decide(state, pod("big", cpu="2"))
    assert decision.message == "0/3 nodes are available: 3 Insufficient cpu."


def test_reasons_are_counted_per_node_and_sorted() -> None:
    tainted = node("t", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    state = cluster(node("small", cpu="1"), tainted, node("x", labels={"zone": "b"}))
    candidate = pod("p", cpu="2")
    candidate["spec"]["nodeSelector"] = {"zone": "b"}
    candidate["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8"
    decision = decide(state, candidate)
    assert decision.message == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {dedicated: gpu}."
    )


def test_resource_fit_counts_pods_already_on_the_node() -> None:
    state = cluster(node("a", cpu="2"), pods=(bound("x", "a", cpu="1500m"),))
    assert not decide(state, pod("p", cpu="600m")).scheduled
    assert decide(state, pod("p", cpu="500m")).node_name == "a"


def test_pod_count_limit() -> None:
    state = cluster(node("a", pods="1"), pods=(bound("x", "a"),))
    assert decide(state, pod("p")).message == "0/1 nodes are available: 1 Too many pods."


def test_terminal_pods_free_their_node_but_terminating_ones_do_not() -> None:
    done = bound("done", "a", cpu="2")
    done["status"] = {"phase": "Succeeded"}
    state = cluster(node("a", cpu="2"), pods=(done,))
    assert decide(state, pod("p", cpu="2")).node_name == "a"
    leaving = bound("leaving", "a", cpu="2")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    state.upsert_pod(leaving)
    assert not decide(state, pod("p", cpu="2")).scheduled


def test_unregistered_and_not_ready_nodes_are_avoided_unless_tolerated() -> None:
    state = cluster(node("n", taints=[{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]))
    assert decide(state, pod("p")).message == (
        "0/1 nodes are available: 1 node(s) had untolerated taint {karpenter.sh/unregistered: }."
    )
    tolerant = pod("p", tolerations=[{"operator": "Exists"}])
    assert decide(state, tolerant).node_name == "n"
    fresh = ClusterState()
    fresh.upsert_node(node("new"))  # no Ready condition yet: treated as not-ready
    assert "node.kubernetes.io/not-ready" in decide(fresh, pod("p")).message


def test_prefer_no_schedule_does_not_filter() -> None:
    state = cluster(node("n", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]))
    assert decide(state, pod("p")).node_name == "n"


def test_cordoned_node_is_skipped() -> None:
    cordoned = node("c")
    cordoned["spec"]["unschedulable"] = True
    state = cluster(cordoned, node("d"))
    assert decide(state, pod("p")).node_name == "d"
    only = cluster(node("c"))
    only.nodes["c"].unschedulable = True
    assert decide(only, pod("p")).message == "0/1 nodes are available: 1 node(s) were unschedulable."


def test_required_node_affinity_terms_are_ored_and_expressions_anded() -> None:
    state = cluster(node("a", labels={"tier": "1", "gen": "3"}), node("b", labels={"tier": "2", "gen": "9"}))
    candidate = pod(
        "p",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "tier", "operator": "In", "values": ["2"]},
                                {"key": "gen", "operator": "Gt", "values": ["5"]},
                            ]
                        },
                        {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["7"]}]},
                    ]
                }
            }
        },
    )
    assert decide(state, candidate).node_name == "b"


def pinned(name: str, *terms: list[dict[str, Any]], cpu: str = "100m") -> dict[str, Any]:
    """A pod whose required node affinity is ``terms`` (each a list of ``matchFields`` requirements)."""
    selector_terms = [{"matchFields": fields} for fields in terms]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": selector_terms}
        }
    }
    return pod(name, cpu=cpu, affinity=affinity)


def names_in(*names: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": list(names)}


def test_a_pod_pinned_by_node_name_goes_to_a_named_node_among_many() -> None:
    state = cluster(*(node(f"n{i}") for i in range(12)))
    state.upsert_pod(bound("busy", "n5", cpu="3"))
    assert decide(state, pinned("ds-7", [names_in("n7")])).node_name == "n7"
    # terms are ORed (the least allocated named node wins), a term's requirements ANDed
    assert decide(state, pinned("either", [names_in("n9")], [names_in("n5")])).node_name == "n9"
    assert decide(state, pinned("both", [names_in("n3", "n4"), names_in("n4", "n8")])).node_name == "n4"
    # a term that names no node leaves every node open
    open_term = pinned("open", [names_in("n1")])
    open_term["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ].append({"matchExpressions": [{"key": "kubernetes.io/os", "operator": "DoesNotExist"}]})
    assert decide(state, open_term).node_name not in (None, "n5")


def test_a_pod_pinned_to_a_full_node_is_told_why_about_every_node() -> None:
    state = cluster(node("a", cpu="2"), node("b"), node("c"))
    state.upsert_pod(bound("busy", "a", cpu="2"))
    decision = decide(state, pinned("ds-a", [names_in("a")], cpu="500m"))
    assert decision.node_name is None
    assert decision.message == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector."
    )


def test_hostname_anti_affinity_spreads_one_pod_per_node() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    state = cluster(node("a"), node("b"))
    placed = []
    for i in range(3):
        candidate = pod(f"db-{i}", labels={"app": "db"}, affinity=anti)
        decision = decide(state, candidate)
        if decision.node_name:
            state.upsert_pod(bound(f"db-{i}", decision.node_name, labels={"app": "db"}, affinity=anti))
        placed.append(decision.node_name)
    assert sorted(p for p in placed[:2] if p) == ["a", "b"]
    assert placed[2] is None
    # and a pod that the existing pods' anti-affinity rejects (symmetry), though it has no rule itself
    assert decide(state, pod("intruder", labels={"app": "db"})).message == (
        "0/2 nodes are available: 2 node(s) didn't satisfy existing pods anti-affinity rules."
    )


def test_zone_topology_spread_do_not_schedule() -> None:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    state = cluster(
        node("a1", labels={"topology.kubernetes.io/zone": "a"}),
        node("b1", labels={"topology.kubernetes.io/zone": "b"}),
        node("nozone"),
        pods=(bound("w0", "a1", labels={"app": "web"}),),
    )
    decision = decide(state, pod("w1", labels={"app": "web"}, topologySpreadConstraints=spread))
    assert decision.node_name == "b1"  # a would make skew 2
    # with zone b unusable (node affinity), zone a would exceed the skew... but b is no longer a domain
    only_a = pod(
        "w1",
        labels={"app": "web"},
        topologySpreadConstraints=spread,
        nodeSelector={"topology.kubernetes.io/zone": "a"},
    )
    assert decide(state, only_a).node_name == "a1"


def test_spread_rejects_nodes_missing_the_topology_key() -> None:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "rack",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    state = cluster(node("n"))
    decision = decide(state, pod("w", labels={"app": "web"}, topologySpreadConstraints=spread))
    assert decision.message == (
        "0/1 nodes are available: "
        "1 node(s) didn't match pod topology spread constraints (missing required label)."
    )


def test_self_affinity_lets_the_first_pod_land_then_follows_it() -> None:
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "cache"}},
                    "topologyKey": "topology.kubernetes.io/zone",
                }
            ]
        }
    }
    state = cluster(
        node("a1", labels={"topology.kubernetes.io/zone": "a"}),
        node("b1", labels={"topology.kubernetes.io/zone": "b"}),
    )
    first = decide(state, pod("c0", labels={"app": "cache"}, affinity=affinity))
    assert first.node_name is not None
    state.upsert_pod(bound("c0", first.node_name, labels={"app": "cache"}))
    for i in range(1, 4):
        assert (
            decide(state, pod(f"c{i}", labels={"app": "cache"}, affinity=affinity)).node_name
            == first.node_name
        )
    stranger = pod(
        "s",
        labels={"app": "other"},
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "nothing"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
    )
    assert "didn't match pod affinity rules" in decide(state, stranger).message


def test_host_ports_cannot_be_shared_on_a_node() -> None:
    def with_port(name: str, port: int, protocol: str = "TCP") -> dict[str, Any]:
        item = pod(name)
        item["spec"]["containers"][0]["ports"] = [
            {"containerPort": 80, "hostPort": port, "protocol": protocol}
        ]
        return item

    taken = with_port("taken", 8080)
    taken["spec"]["nodeName"] = "a"
    state = cluster(node("a"), pods=(taken,))
    assert decide(state, with_port("p", 8080)).message == (
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    )
    assert decide(state, with_port("p", 8080, "UDP")).node_name == "a"
    assert decide(state, with_port("p", 9090)).node_name == "a"


def test_least_allocated_node_wins_ties_by_name() -> None:
    state = cluster(node("b", cpu="4"), node("a", cpu="4"), node("c", cpu="8"))
    assert decide(state, pod("p", cpu="1")).node_name == "c"
    state = cluster(node("b", cpu="4"), node("a", cpu="4"))
    assert decide(state, pod("p", cpu="1")).node_name == "a"


def nominated(name: str, node_name: str, **kwargs: Any) -> dict[str, Any]:
    item = pod(name, **kwargs)
    item.setdefault("status", {})["nominatedNodeName"] = node_name
    return item


def test_a_pod_nominated_to_a_node_goes_there_when_it_fits_though_another_scores_higher() -> None:
    state = cluster(node("a", cpu="2"), node("b", cpu="8"))
    assert decide(state, pod("p", cpu="1")).node_name == "b"
    assert decide(state, nominated("p", "a", cpu="1")).node_name == "a"
    # where it does not fit, it goes where it can, as any pod
    assert decide(state, nominated("p", "a", cpu="3")).node_name == "b"


def test_room_held_for_a_nominated_pod_is_not_given_to_another_pod_of_no_higher_priority() -> None:
    state = cluster(node("a", cpu="2"), pods=(nominated("waiting", "a", cpu="1500m"),))
    assert decide(state, pod("p", cpu="1")).message == "0/1 nodes are available: 1 Insufficient cpu."
    assert decide(state, pod("urgent", cpu="1", priority=1000)).node_name == "a"
    assert decide(state, nominated("waiting", "a", cpu="1500m")).node_name == "a"
    # once it is bound, the room it held is its own: counted once, not twice
    state.assume("default/waiting", "a")
    assert decide(state, pod("p", cpu="500m")).node_name == "a"
    assert not state.nominated


def test_room_held_follows_the_nominations_as_they_come_and_go() -> None:
    state = cluster(node("a", cpu="4"), node("b", cpu="1"), pods=(nominated("w1", "a", cpu="2"),))
    assert decide(state, pod("p", cpu="2")).node_name == "a"
    state.upsert_pod(nominated("w2", "a", cpu="2"))
    assert decide(state, pod("p", cpu="2")).message == "0/2 nodes are available: 2 Insufficient cpu."
    state.upsert_pod(nominated("w2", "b", cpu="2"))  # nominated elsewhere now: its room here is free again
    assert decide(state, pod("p", cpu="2")).node_name == "a"
    state.remove_pod("default/w1")
    assert decide(state, pod("p", cpu="4")).node_name == "a"


def test_named_node_and_bad_operator() -> None:
    state = cluster(node("a"), node("b"))
    assert decide(state, pod("p", nodeName="")).scheduled
    bad = pod(
        "p",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "x", "operator": "Near"}]}]
                }
            }
        },
    )
    with pytest.raises(ValueError, match=r"nodeSelectorTerms\[0\].matchExpressions\[0\].operator"):
        decide(state, bad)


# ---------------------------------------------------------------------------------------------- profiles
def test_field_profile_reproduces_the_measured_timeline() -> None:
    field = get_profile("field")
    assert field.machine_provision == 64
    assert field.machine_provision + field.node_join == 72
    assert field.machine_provision + field.node_join + field.node_ready == 139
    tenth = get_profile("field", 0.1)
    assert math.isclose(tenth.machine_provision + tenth.node_join + tenth.node_ready, 13.9)
    fast = get_profile("fast")
    assert fast.machine_provision + fast.node_join + fast.node_ready + fast.pod_start < 1.0


def test_profile_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="unknown timing profile 'slow'"):
        get_profile("slow")
    with pytest.raises(ValueError, match="scale must be a positive finite number"):
        get_profile("fast", 0)


def test_pods_booked_in_the_same_cycle_count_for_spread_and_anti_affinity() -> None:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    state = cluster(
        *(node(f"{zone}{i}", labels={"topology.kubernetes.io/zone": zone}) for zone in "ab" for i in range(2))
    )
    placed: list[str] = []
    for i in range(5):
        candidate = pod(f"w{i}", labels={"app": "web"}, topologySpreadConstraints=spread, affinity=anti)
        state.upsert_pod(candidate)  # pending, as the scheduler's cache holds it
        decision = decide(state, candidate)
        if decision.node_name:
            state.assume(f"default/w{i}", decision.node_name)  # booked, no watch event yet
            placed.append(decision.node_name)
    # one per node (anti-affinity), alternating zones (spread), and the fifth has nowhere to go
    assert sorted(placed) == ["a0", "a1", "b0", "b1"]
    assert [p[0] for p in placed[:2]] in (["a", "b"], ["b", "a"])
