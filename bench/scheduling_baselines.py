"""Three baselines and the exact optimum, on the same parsed inputs tenon solves.

Each baseline sees a single NodePool's *shapes* (instance type, allocatable after overhead and DaemonSets,
capacity, cheapest available price) built with tenon's own template code, and the pods' request vectors
(cpu, memory, pods). Topology constraints are ignored: they run on the cost scenarios, the field cases and
the kwok "basic" workload, none of which has any.

* :func:`ca_least_waste`: cluster-autoscaler's least-waste expander. One node group at a time: for every
  group, simulate how many nodes it needs for the pending pods (first-fit decreasing); keep the group with the
  lowest ``wasted cpu fraction + wasted memory fraction`` (on *capacity*, as ``waste.go`` does); repeat with
  the pods left.
* :func:`karpenter_core`: Karpenter's scheduler. Pods first-fit-decreasing (cpu, then memory); a pod joins the
  first planned NodeClaim (fewest pods first) that some remaining instance type still fits, else opens a new
  one; NodeClaims grow up to the largest type. The launch picks the cheapest type that fits.
* :func:`karpenter_capi`: the same, but the Cluster API provider launches the first fitting type by name.
* :func:`optimum`: the exact minimum price, a MILP solved with HiGHS (``highspy``): binary "bin b of type t is
  bought", integer "how many pods of shape s in bin b", capacity rows per resource, symmetry breaking.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tenon.core.catalog import instance_types_for_node_pool
from tenon.core.model import ClusterInput
from tenon.core.templates import build_templates

Vec = tuple[int, int, int]


@dataclass(frozen=True)
class Shape:
    name: str
    alloc: Vec
    capacity: tuple[int, int]
    price: float


@dataclass(frozen=True)
class Outcome:
    price: float
    nodes: int
    types: tuple[str, ...]
    unplaced: int = 0


def shapes_and_pods(inputs: ClusterInput) -> tuple[list[Shape], list[Vec]]:
    pool = sorted(inputs.node_pools, key=lambda p: (-p.weight, p.name))[0]
    types, _ = instance_types_for_node_pool(inputs, pool)
    templates = build_templates([(pool, types)], inputs.daemon_sets, ["cpu", "memory", "pods"])
    shapes = [
        Shape(
            t.instance_type.name,
            (t.alloc[0], t.alloc[1], t.alloc[2]),
            (t.capacity.get("cpu", 0), t.capacity.get("memory", 0)),
            t.min_price,
        )
        for t in templates
    ]
    pods = [
        (p.requests.get("cpu", 0), p.requests.get("memory", 0), 1) for p in inputs.pods if not p.node_name
    ]
    return shapes, pods


def _fits(used: Sequence[int], pod: Vec, alloc: Vec) -> bool:
    return all(u + p <= a for u, p, a in zip(used, pod, alloc, strict=True))


def _karpenter(shapes: Sequence[Shape], pods: Sequence[Vec], choose_first_by_name: bool) -> Outcome:
    order = sorted(pods, key=lambda p: (-p[0], -p[1]))
    claims: list[tuple[list[int], list[Shape], list[Vec]]] = []
    unplaced = 0
    for pod in order:
        for used, options, members in sorted(claims, key=lambda c: len(c[2])):
            narrowed = [s for s in options if _fits(used, pod, s.alloc)]
            if narrowed:
                for d in range(3):
                    used[d] += pod[d]
                options[:] = narrowed
                members.append(pod)
                break
        else:
            options = [s for s in shapes if _fits((0, 0, 0), pod, s.alloc)]
            if not options:
                unplaced += 1
                continue
            claims.append(([pod[0], pod[1], pod[2]], options, [pod]))
    chosen = []
    for _, options, _ in claims:
        if choose_first_by_name:
            chosen.append(min(options, key=lambda s: s.name.lower()))
        else:
            chosen.append(min(options, key=lambda s: (s.price, s.name)))
    return Outcome(sum(s.price for s in chosen), len(chosen), tuple(sorted(s.name for s in chosen)), unplaced)


def karpenter_core(shapes: Sequence[Shape], pods: Sequence[Vec]) -> Outcome:
    return _karpenter(shapes, pods, choose_first_by_name=False)


def karpenter_capi(shapes: Sequence[Shape], pods: Sequence[Vec]) -> Outcome:
    return _karpenter(shapes, pods, choose_first_by_name=True)


def _ffd_nodes(shape: Shape, pending: Counter[Vec]) -> tuple[int, Counter[Vec]]:
    """Nodes of ``shape`` first-fit-decreasing for the pods that fit it; returns (nodes, pods placed)."""
    left = Counter({p: n for p, n in pending.items() if _fits((0, 0, 0), p, shape.alloc)})
    placed: Counter[Vec] = Counter()
    nodes = 0
    order = sorted(left, key=lambda p: (-p[0], -p[1]))
    while sum(left.values()):
        nodes += 1
        room = list(shape.alloc)
        for p in order:
            k = left[p]
            for d in range(3):
                if p[d]:
                    k = min(k, room[d] // p[d])
            if k > 0:
                left[p] -= k
                placed[p] += k
                for d in range(3):
                    room[d] -= p[d] * k
    return nodes, placed


def ca_least_waste(shapes: Sequence[Shape], pods: Sequence[Vec]) -> Outcome:
    pending: Counter[Vec] = Counter(pods)
    chosen: list[Shape] = []
    while sum(pending.values()):
        best = None
        for shape in shapes:
            nodes, placed = _ffd_nodes(shape, pending)
            if not nodes:
                continue
            cpu = sum(p[0] * n for p, n in placed.items())
            mem = sum(p[1] * n for p, n in placed.items())
            avail_cpu, avail_mem = shape.capacity[0] * nodes, shape.capacity[1] * nodes
            waste = (avail_cpu - cpu) / avail_cpu + (avail_mem - mem) / avail_mem
            key = (waste, shape.name)
            if best is None or key < best[0]:
                best = (key, shape, nodes, placed)
        if best is None:
            break
        _, shape, nodes, placed = best
        chosen += [shape] * nodes
        pending -= placed
    return Outcome(
        sum(s.price for s in chosen),
        len(chosen),
        tuple(sorted(s.name for s in chosen)),
        sum(pending.values()),
    )


def optimum(shapes: Sequence[Shape], pods: Sequence[Vec], time_limit: float = 20.0) -> tuple[float, bool]:
    """Exact minimum total price (and whether HiGHS proved it optimal within the time limit)."""
    import highspy

    counts = Counter(pods)
    classes = sorted(counts)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", time_limit)
    h.setOptionValue("mip_rel_gap", 1e-6)
    h.setOptionValue("threads", 1)
    y = {}
    x = {}
    for t, shape in enumerate(shapes):
        fitting = [c for c in classes if _fits((0, 0, 0), c, shape.alloc)]
        if not fitting:
            continue
        bins = min(len(pods), sum(counts[c] for c in fitting))
        for b in range(bins):
            y[t, b] = h.addVariable(0, 1, shape.price, highspy.HighsVarType.kInteger)
            for c in fitting:
                x[c, t, b] = h.addVariable(0, counts[c], 0.0, highspy.HighsVarType.kInteger)
            for d in range(3):
                terms = [c[d] * x[c, t, b] for c in fitting if c[d]]
                if terms:
                    h.addConstr(sum(terms[1:], terms[0]) <= shape.alloc[d] * y[t, b])
            if b:
                h.addConstr(y[t, b] <= y[t, b - 1])
    for c in classes:
        terms = [v for (cc, _, _), v in x.items() if cc == c]
        h.addConstr(sum(terms[1:], terms[0]) == counts[c])
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    proven = status == highspy.HighsModelStatus.kOptimal
    return float(info.objective_function_value), proven
