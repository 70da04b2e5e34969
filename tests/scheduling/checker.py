"""An independent checker of plans: re-derives the rules from the input dicts, not from the library.

Given the objects a test generated (simple forms only: one NodePool, one InstanceCatalog, DaemonSets that
tolerate everything, pods with integer millicore cpu and Mi memory requests, nodeSelector, tolerations,
hostname anti-affinity, zone and hostname spread, existing Nodes with bound pods) and the plan's JSON,
:func:`violations` lists every broken
rule: a pod placed twice or lost, a node over its allocatable after overhead and DaemonSets, a nodeSelector
or taint ignored, anti-affinity or spread skew broken, a price that is not the offering's price.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any


def _milli(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000


def _mib(mem: str) -> int:
    if mem.endswith("Gi"):
        return int(mem[:-2]) * 1024
    if mem.endswith("Mi"):
        return int(mem[:-2])
    return int(mem) // 2**20


def violations(docs: list[dict[str, Any]], out: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    pools = [d for d in docs if d["kind"] == "NodePool"]
    types = {t["name"]: t for d in docs if d["kind"] == "InstanceCatalog" for t in d["spec"]["instanceTypes"]}
    daemons = [d for d in docs if d["kind"] == "DaemonSet"]
    all_pods = {
        f"{d['metadata']['namespace']}/{d['metadata']['name']}": d for d in docs if d["kind"] == "Pod"
    }
    pods = {k: d for k, d in all_pods.items() if not d["spec"].get("nodeName")}
    nodes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Node"}

    seen = Counter(p for nc in out["nodeClaims"] for p in nc["pods"])
    seen.update(p for e in out["existingNodes"] for p in e["pods"])
    seen.update(u["pod"] for u in out["unschedulable"])
    for key in pods:
        if seen[key] != 1:
            problems.append(f"{key} appears {seen[key]} times in the plan")
    for key in seen:
        if key not in pods:
            problems.append(f"{key} is in the plan but not in the input")

    zone_of: dict[str, str] = {}
    node_of: dict[str, int | str] = {}
    for e in out["existingNodes"]:
        n = nodes[e["name"]]
        labels = n["metadata"].get("labels", {})
        alloc = n["status"]["allocatable"]
        cpu, mem = _milli(alloc["cpu"]), _mib(alloc["memory"])
        residents = [k for k, d in all_pods.items() if d["spec"].get("nodeName") == e["name"]] + e["pods"]
        for key in residents:
            req = all_pods[key]["spec"]["containers"][0]["resources"]["requests"]
            cpu -= _milli(req["cpu"])
            mem -= _mib(req["memory"])
        if cpu < 0 or mem < 0:
            problems.append(f"existing node {e['name']} over its allocatable: {cpu}m {mem}Mi left")
        for key in e["pods"]:
            spec = pods[key]["spec"]
            for k, v in spec.get("nodeSelector", {}).items():
                if labels.get(k) != v:
                    problems.append(f"{key}: nodeSelector {k}={v} but node {e['name']} has {labels.get(k)}")
            for taint in n["spec"].get("taints", []):
                if not any(
                    tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", "")
                    for tol in spec.get("tolerations", [])
                ):
                    problems.append(f"{key}: taint {taint['key']} of node {e['name']} not tolerated")
            if "topology.kubernetes.io/zone" in labels:
                zone_of[key] = labels["topology.kubernetes.io/zone"]
            node_of[key] = e["name"]
    for key, d in all_pods.items():
        if d["spec"].get("nodeName") in nodes:
            node_of[key] = d["spec"]["nodeName"]
            zone = (
                nodes[d["spec"]["nodeName"]]["metadata"].get("labels", {}).get("topology.kubernetes.io/zone")
            )
            if zone:
                zone_of[key] = zone
    for i, nc in enumerate(out["nodeClaims"]):
        t = types.get(nc["instanceType"])
        if t is None:
            problems.append(f"node {i}: unknown instance type {nc['instanceType']}")
            continue
        offers = [
            o for o in t["offerings"] if o["zone"] == nc["zone"] and o["capacityType"] == nc["capacityType"]
        ]
        if not offers or abs(offers[0]["price"] - nc["pricePerHour"]) > 1e-6:
            problems.append(
                f"node {i}: no offering {nc['zone']}/{nc['capacityType']} at {nc['pricePerHour']}"
            )
        pool = next(p for p in pools if p["metadata"]["name"] == nc["nodePool"])
        pspec = pool["spec"]["template"]["spec"]
        labels = {
            **t.get("labels", {}),
            **pool["spec"]["template"].get("metadata", {}).get("labels", {}),
            "topology.kubernetes.io/zone": nc["zone"],
            "karpenter.sh/capacity-type": nc["capacityType"],
            "node.kubernetes.io/instance-type": t["name"],
        }
        cpu = _milli(t["capacity"]["cpu"]) - _milli(t.get("overhead", {}).get("cpu", "0"))
        mem = _mib(t["capacity"]["memory"]) - _mib(t.get("overhead", {}).get("memory", "0"))
        room_pods = int(t["capacity"]["pods"])
        for ds in daemons:
            c = ds["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
            cpu -= _milli(c["cpu"])
            mem -= _mib(c.get("memory", "0"))
            room_pods -= 1
        used_cpu = used_mem = 0
        for key in nc["pods"]:
            p = pods[key]
            req = p["spec"]["containers"][0]["resources"]["requests"]
            used_cpu += _milli(req["cpu"])
            used_mem += _mib(req["memory"])
            for k, v in p["spec"].get("nodeSelector", {}).items():
                if labels.get(k) != v:
                    problems.append(f"{key}: nodeSelector {k}={v} but node {i} has {labels.get(k)}")
            for taint in pspec.get("taints", []):
                if not any(
                    tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", "")
                    for tol in p["spec"].get("tolerations", [])
                ):
                    problems.append(f"{key}: taint {taint['key']} not tolerated on node {i}")
            zone_of[key] = nc["zone"]
            node_of[key] = i
        if used_cpu > cpu or used_mem > mem or len(nc["pods"]) > room_pods:
            problems.append(
                f"node {i} ({t['name']}): {used_cpu}m/{used_mem}Mi/{len(nc['pods'])} pods "
                f"over {cpu}m/{mem}Mi/{room_pods}"
            )

    def matches(sel: dict[str, str], key: str) -> bool:
        labels = all_pods[key]["metadata"].get("labels", {})
        return all(labels.get(k) == v for k, v in sel.items())

    by_node: dict[int | str, list[str]] = defaultdict(list)
    for key, where in node_of.items():
        by_node[where].append(key)

    def domains(key: str) -> set[str]:
        """Zones a spread counts for this pod: nodes (existing or launchable) matching its nodeSelector,
        taints ignored (Kubernetes' default nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore)."""
        selector = all_pods[key]["spec"].get("nodeSelector", {})
        found = {
            o["zone"]
            for t in types.values()
            for o in t["offerings"]
            if all(t.get("labels", {}).get(k) == v for k, v in selector.items())
        }
        for n in nodes.values():
            labels = n["metadata"].get("labels", {})
            if (
                all(labels.get(k) == v for k, v in selector.items())
                and "topology.kubernetes.io/zone" in labels
            ):
                found.add(labels["topology.kubernetes.io/zone"])
        return found

    for key, where in node_of.items():
        spec = all_pods[key]["spec"]
        for term in (
            spec.get("affinity", {})
            .get("podAntiAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", [])
        ):
            sel = term["labelSelector"]["matchLabels"]
            if term["topologyKey"] == "kubernetes.io/hostname":
                others = [o for o in by_node[where] if o != key and matches(sel, o)]
                if others:
                    problems.append(f"{key}: anti-affinity broken on node {where} by {others[0]}")
        for tsc in spec.get("topologySpreadConstraints", []):
            if tsc["whenUnsatisfiable"] != "DoNotSchedule":
                continue
            sel = tsc["labelSelector"]["matchLabels"]
            if tsc["topologyKey"] == "topology.kubernetes.io/zone":
                counts = Counter(zone_of[o] for o in zone_of if matches(sel, o))
                skew = counts[zone_of[key]] - min(counts[z] for z in domains(key))
                if skew > tsc["maxSkew"]:
                    problems.append(f"{key}: zone skew {skew} > {tsc['maxSkew']} ({dict(counts)})")
            if tsc["topologyKey"] == "kubernetes.io/hostname":
                here = sum(1 for o in by_node[where] if matches(sel, o))
                if here > tsc["maxSkew"]:
                    problems.append(f"{key}: {here} matching pods on node {where} > maxSkew {tsc['maxSkew']}")
    total = sum(nc["pricePerHour"] for nc in out["nodeClaims"])
    if abs(total - out["totalPricePerHour"]) > 1e-4:
        problems.append(f"totalPricePerHour {out['totalPricePerHour']} != sum {total}")
    return problems
