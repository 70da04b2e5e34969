"""An independent checker of plans: re-derives the rules from the input dicts, not from the library.

Given the objects a test generated (simple forms only: one NodePool, one InstanceCatalog, DaemonSets that
tolerate everything, pods with integer millicore cpu and Mi memory requests, nodeSelector, tolerations,
hostname anti-affinity, zone and hostname spread, existing Nodes with bound pods) and the plan's JSON,
:func:`violations` lists every broken rule: a pod placed twice or lost, a node over its allocatable after
overhead and DaemonSets, a nodeSelector or taint ignored, anti-affinity or spread skew broken, a price that
is not the offering's price.

Zone spreads are judged per placement (as the kube-scheduler judges them): a pod counted by a spread but
placed after the pod that has it may leave the final state over ``maxSkew``. The final state must hold a
spread when every pending pod its selector counts carries that same spread and node selector (each placement
kept its domain within ``maxSkew`` of a minimum that only grows), and that is what is checked.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


def _milli(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000


def _mib(mem: str) -> int:
    if mem.endswith("Gi"):
        return int(mem[:-2]) * 1024
    if mem.endswith("Mi"):
        return int(mem[:-2])
    return int(mem) // 2**20


def _tolerated(taint: dict[str, Any], spec: dict[str, Any]) -> bool:
    return any(
        tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", "")
        for tol in spec.get("tolerations", [])
    )


def _requests(pod: dict[str, Any]) -> tuple[int, int]:
    req = pod["spec"]["containers"][0]["resources"]["requests"]
    return _milli(req["cpu"]), _mib(req["memory"])


class _Check:
    """One plan against its input; each step appends what it finds to ``problems``."""

    def __init__(self, docs: list[dict[str, Any]], out: dict[str, Any]):
        self.out = out
        self.pools = [d for d in docs if d["kind"] == "NodePool"]
        self.types = {
            t["name"]: t for d in docs if d["kind"] == "InstanceCatalog" for t in d["spec"]["instanceTypes"]
        }
        self.daemons = [d for d in docs if d["kind"] == "DaemonSet"]
        self.all_pods = {
            f"{d['metadata']['namespace']}/{d['metadata']['name']}": d for d in docs if d["kind"] == "Pod"
        }
        self.pods = {k: d for k, d in self.all_pods.items() if not d["spec"].get("nodeName")}
        self.nodes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Node"}
        self.problems: list[str] = []
        self.zone_of: dict[str, str] = {}
        self.node_of: dict[str, int | str] = {}

    def run(self) -> list[str]:
        self.each_pod_once()
        for e in self.out["existingNodes"]:
            self.existing_node(e)
        self.bound_pods()
        for i, nc in enumerate(self.out["nodeClaims"]):
            self.new_node(i, nc)
        self.topology()
        total = sum(nc["pricePerHour"] for nc in self.out["nodeClaims"])
        if abs(total - self.out["totalPricePerHour"]) > 1e-4:
            self.problems.append(f"totalPricePerHour {self.out['totalPricePerHour']} != sum {total}")
        return self.problems

    def each_pod_once(self) -> None:
        seen = Counter(p for nc in self.out["nodeClaims"] for p in nc["pods"])
        seen.update(p for e in self.out["existingNodes"] for p in e["pods"])
        seen.update(u["pod"] for u in self.out["unschedulable"])
        for key in self.pods:
            if seen[key] != 1:
                self.problems.append(f"{key} appears {seen[key]} times in the plan")
        for key in seen:
            if key not in self.pods:
                self.problems.append(f"{key} is in the plan but not in the input")

    def _selected_and_tolerated(
        self, key: str, where: str, labels: dict[str, Any], taints: list[Any]
    ) -> None:
        spec = self.pods[key]["spec"]
        for k, v in spec.get("nodeSelector", {}).items():
            if labels.get(k) != v:
                self.problems.append(f"{key}: nodeSelector {k}={v} but node {where} has {labels.get(k)}")
        for taint in taints:
            if not _tolerated(taint, spec):
                self.problems.append(f"{key}: taint {taint['key']} not tolerated on node {where}")

    def existing_node(self, e: dict[str, Any]) -> None:
        n = self.nodes[e["name"]]
        labels = n["metadata"].get("labels", {})
        alloc = n["status"]["allocatable"]
        cpu, mem = _milli(alloc["cpu"]), _mib(alloc["memory"])
        residents = [k for k, d in self.all_pods.items() if d["spec"].get("nodeName") == e["name"]] + e[
            "pods"
        ]
        for key in residents:
            c, m = _requests(self.all_pods[key])
            cpu, mem = cpu - c, mem - m
        if cpu < 0 or mem < 0:
            self.problems.append(f"existing node {e['name']} over its allocatable: {cpu}m {mem}Mi left")
        for key in e["pods"]:
            self._selected_and_tolerated(key, e["name"], labels, n["spec"].get("taints", []))
            if ZONE in labels:
                self.zone_of[key] = labels[ZONE]
            self.node_of[key] = e["name"]

    def bound_pods(self) -> None:
        for key, d in self.all_pods.items():
            name = d["spec"].get("nodeName")
            if name in self.nodes:
                self.node_of[key] = name
                zone = self.nodes[name]["metadata"].get("labels", {}).get(ZONE)
                if zone:
                    self.zone_of[key] = zone

    def _room(self, t: dict[str, Any]) -> tuple[int, int, int]:
        """A type's allocatable cpu, memory and pods after overhead and DaemonSets."""
        cpu = _milli(t["capacity"]["cpu"]) - _milli(t.get("overhead", {}).get("cpu", "0"))
        mem = _mib(t["capacity"]["memory"]) - _mib(t.get("overhead", {}).get("memory", "0"))
        room_pods = int(t["capacity"]["pods"])
        for ds in self.daemons:
            c = ds["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
            cpu -= _milli(c["cpu"])
            mem -= _mib(c.get("memory", "0"))
            room_pods -= 1
        return cpu, mem, room_pods

    def new_node(self, i: int, nc: dict[str, Any]) -> None:
        t = self.types.get(nc["instanceType"])
        if t is None:
            self.problems.append(f"node {i}: unknown instance type {nc['instanceType']}")
            return
        offers = [
            o for o in t["offerings"] if o["zone"] == nc["zone"] and o["capacityType"] == nc["capacityType"]
        ]
        if not offers or abs(offers[0]["price"] - nc["pricePerHour"]) > 1e-6:
            self.problems.append(
                f"node {i}: no offering {nc['zone']}/{nc['capacityType']} at {nc['pricePerHour']}"
            )
        pool = next(p for p in self.pools if p["metadata"]["name"] == nc["nodePool"])
        labels = {
            **t.get("labels", {}),
            **pool["spec"]["template"].get("metadata", {}).get("labels", {}),
            ZONE: nc["zone"],
            "karpenter.sh/capacity-type": nc["capacityType"],
            "node.kubernetes.io/instance-type": t["name"],
        }
        cpu, mem, room_pods = self._room(t)
        used_cpu = used_mem = 0
        for key in nc["pods"]:
            c, m = _requests(self.pods[key])
            used_cpu, used_mem = used_cpu + c, used_mem + m
            self._selected_and_tolerated(
                key, str(i), labels, pool["spec"]["template"]["spec"].get("taints", [])
            )
            self.zone_of[key] = nc["zone"]
            self.node_of[key] = i
        if used_cpu > cpu or used_mem > mem or len(nc["pods"]) > room_pods:
            self.problems.append(
                f"node {i} ({t['name']}): {used_cpu}m/{used_mem}Mi/{len(nc['pods'])} pods "
                f"over {cpu}m/{mem}Mi/{room_pods}"
            )

    def _matches(self, sel: dict[str, str], key: str) -> bool:
        labels = self.all_pods[key]["metadata"].get("labels", {})
        return all(labels.get(k) == v for k, v in sel.items())

    def _domains(self, key: str) -> set[str]:
        """Zones a spread counts for this pod: nodes (existing or launchable) matching its nodeSelector,
        taints ignored (Kubernetes' default nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore)."""
        selector = self.all_pods[key]["spec"].get("nodeSelector", {})
        found = {
            o["zone"]
            for t in self.types.values()
            for o in t["offerings"]
            if all(t.get("labels", {}).get(k) == v for k, v in selector.items())
        }
        for n in self.nodes.values():
            labels = n["metadata"].get("labels", {})
            if all(labels.get(k) == v for k, v in selector.items()) and ZONE in labels:
                found.add(labels[ZONE])
        return found

    def topology(self) -> None:
        by_node: dict[int | str, list[str]] = defaultdict(list)
        for key, where in self.node_of.items():
            by_node[where].append(key)
        for key, where in self.node_of.items():
            spec = self.all_pods[key]["spec"]
            anti = spec.get("affinity", {}).get("podAntiAffinity", {})
            for term in anti.get("requiredDuringSchedulingIgnoredDuringExecution", []):
                sel = term["labelSelector"]["matchLabels"]
                others = [o for o in by_node[where] if o != key and self._matches(sel, o)]
                if term["topologyKey"] == HOSTNAME and others:
                    self.problems.append(f"{key}: anti-affinity broken on node {where} by {others[0]}")
            for tsc in spec.get("topologySpreadConstraints", []):
                if tsc["whenUnsatisfiable"] == "DoNotSchedule":
                    self._spread(key, where, tsc, by_node)

    def _homogeneous(self, key: str, tsc: dict[str, Any]) -> bool:
        """Whether every pending pod the spread's selector counts has this very spread and node selector."""
        sel = tsc["labelSelector"]["matchLabels"]
        mine = ([tsc], self.all_pods[key]["spec"].get("nodeSelector", {}))
        return all(
            mine == (d["spec"].get("topologySpreadConstraints", []), d["spec"].get("nodeSelector", {}))
            for k, d in self.pods.items()
            if self._matches(sel, k)
        )

    def _spread(
        self, key: str, where: int | str, tsc: dict[str, Any], by_node: dict[int | str, list[str]]
    ) -> None:
        sel = tsc["labelSelector"]["matchLabels"]
        if tsc["topologyKey"] == ZONE and self._homogeneous(key, tsc):
            counts = Counter(self.zone_of[o] for o in self.zone_of if self._matches(sel, o))
            skew = counts[self.zone_of[key]] - min(counts[z] for z in self._domains(key))
            if skew > tsc["maxSkew"]:
                self.problems.append(f"{key}: zone skew {skew} > {tsc['maxSkew']} ({dict(counts)})")
        if tsc["topologyKey"] == HOSTNAME:
            here = sum(1 for o in by_node[where] if self._matches(sel, o))
            if here > tsc["maxSkew"]:
                self.problems.append(
                    f"{key}: {here} matching pods on node {where} > maxSkew {tsc['maxSkew']}"
                )


def violations(docs: list[dict[str, Any]], out: dict[str, Any]) -> list[str]:
    """Every rule the plan ``out`` breaks for the input ``docs`` (empty: none)."""
    return _Check(docs, out).run()
