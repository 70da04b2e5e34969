"""A pod spec (a Pod's, or a workload's template) to the scheduler's :class:`~tenon.core.model.Pod`.

What scheduling reads of a pod, each in its own step: requests (Kubernetes' ``PodRequests``: the sum of
containers, sidecars (init containers with ``restartPolicy: Always``) added, the max rule for ordinary init
containers, plus ``spec.overhead``, plus ``pods: 1``; a container with limits but no requests requests its
limits, as the API server defaults it), ``nodeSelector`` folded into every required node-affinity term,
preferred node affinity (heaviest first), tolerations, required and preferred pod (anti-)affinity (preferred
terms heaviest first), topology spread constraints (``matchLabelKeys`` folded into the selector), host ports,
the PersistentVolumeClaims and generic ephemeral volumes that may bind it to a topology, ``spec.nodeName``
(bound) and ``status.nominatedNodeName`` (being placed by the kube-scheduler).

Pods of one workload share one spec: :class:`SpecCache` parses a spec once and gives each replica its name,
so a Deployment of 20,000 replicas (or 20,000 identical Pods) costs one parse and 20,000 copies.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import msgspec

from tenon.core.fields import Ctx, requirement, selector, shown, tolerations
from tenon.core.model import HostPort, Pod, PodAffinityTerm, PodVolume, TopologySpread
from tenon.core.quantities import PODS
from tenon.core.requirements import NODE_OPERATORS, LabelSelector, Requirement

RD = "requiredDuringSchedulingIgnoredDuringExecution"
PD = "preferredDuringSchedulingIgnoredDuringExecution"
NodeTerms = tuple[tuple[Requirement, ...], ...]


def _add(into: dict[str, int], extra: Mapping[str, int]) -> None:
    for key, amount in extra.items():
        into[key] = into.get(key, 0) + amount


def _container_requests(ctx: Ctx, container: Any, field: str) -> dict[str, int]:
    resources = ctx.mapping(ctx.mapping(container, field).get("resources"), f"{field}.resources")
    limits = ctx.resources(resources.get("limits"), f"{field}.resources.limits")
    requests = ctx.resources(resources.get("requests"), f"{field}.resources.requests")
    return {**limits, **requests}


def pod_requests(ctx: Ctx, spec: Mapping[str, Any], field: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for i, c in enumerate(ctx.listing(spec.get("containers"), f"{field}.containers")):
        _add(total, _container_requests(ctx, c, f"{field}.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, c in enumerate(ctx.listing(spec.get("initContainers"), f"{field}.initContainers")):
        req = _container_requests(ctx, c, f"{field}.initContainers[{i}]")
        if ctx.mapping(c, f"{field}.initContainers[{i}]").get("restartPolicy") == "Always":
            _add(total, req)
            _add(sidecars, req)
            during = dict(sidecars)
        else:
            during = dict(req)
            _add(during, sidecars)
        for key, amount in during.items():
            init_peak[key] = max(init_peak.get(key, 0), amount)
    for key, amount in init_peak.items():
        total[key] = max(total.get(key, 0), amount)
    _add(total, ctx.resources(spec.get("overhead"), f"{field}.overhead"))
    total[PODS] = total.get(PODS, 0) + 1
    return total


def node_selector_terms(
    ctx: Ctx, raw: Any, path: str, operators: tuple[str, ...] = NODE_OPERATORS
) -> NodeTerms:
    """``nodeSelectorTerms`` (an OR of terms, each an AND of ``matchExpressions``)."""
    terms = []
    for i, term in enumerate(ctx.listing(raw, path)):
        tpath = f"{path}[{i}]"
        exprs = ctx.listing(ctx.mapping(term, tpath).get("matchExpressions"), f"{tpath}.matchExpressions")
        terms.append(
            tuple(
                requirement(ctx, e, f"{tpath}.matchExpressions[{j}]", operators) for j, e in enumerate(exprs)
            )
        )
    return tuple(terms)


def _node_affinity(
    ctx: Ctx, spec: Mapping[str, Any], affinity: Mapping[str, Any], field: str
) -> tuple[NodeTerms, tuple[tuple[int, tuple[Requirement, ...]], ...]]:
    """Required terms (``nodeSelector`` folded into each) and preferred terms, heaviest first."""
    chosen = ctx.labels(spec.get("nodeSelector"), f"{field}.nodeSelector")
    base = tuple(Requirement(k, "In", (v,)) for k, v in sorted(chosen.items()))
    node_aff = ctx.mapping(affinity.get("nodeAffinity"), f"{field}.affinity.nodeAffinity")
    path = f"{field}.affinity.nodeAffinity.{RD}"
    required = ctx.mapping(node_aff.get(RD), path)
    terms = node_selector_terms(ctx, required.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    preferred = []
    ppath = f"{field}.affinity.nodeAffinity.{PD}"
    for i, pref in enumerate(ctx.listing(node_aff.get(PD), ppath)):
        pref = ctx.mapping(pref, f"{ppath}[{i}]")
        weight = ctx.integer(pref.get("weight", 1), f"{ppath}[{i}].weight", 1, 100)
        pterm = ctx.mapping(pref.get("preference"), f"{ppath}[{i}].preference")
        exprs = ctx.listing(pterm.get("matchExpressions"), f"{ppath}[{i}].preference.matchExpressions")
        reqs = tuple(
            requirement(ctx, e, f"{ppath}[{i}].preference.matchExpressions[{j}]", NODE_OPERATORS)
            for j, e in enumerate(exprs)
        )
        preferred.append((weight, reqs))
    preferred.sort(key=lambda p: -p[0])
    return tuple(base + term for term in terms) or (base,), tuple(preferred)


def _term_selector(ctx: Ctx, raw: Any, path: str) -> LabelSelector:
    """A term's pod selector; none given (``null``) selects no pod, as Kubernetes reads it."""
    return LabelSelector(nothing=True) if raw is None else selector(ctx, raw, path)


def _affinity_term(ctx: Ctx, term: Any, path: str, namespace: str) -> PodAffinityTerm:
    term = ctx.mapping(term, path)
    key = term.get("topologyKey")
    if not key or not isinstance(key, str):
        raise ctx.error(f"{path}.topologyKey", "is required")
    ns_sel = term.get("namespaceSelector")
    all_ns = isinstance(ns_sel, Mapping) and not ns_sel
    names = tuple(str(n) for n in ctx.listing(term.get("namespaces"), f"{path}.namespaces")) or (namespace,)
    return PodAffinityTerm(
        _term_selector(ctx, term.get("labelSelector"), f"{path}.labelSelector"), key, names, all_ns
    )


def _affinity_terms(ctx: Ctx, raw: Any, field: str, namespace: str) -> tuple[PodAffinityTerm, ...]:
    return tuple(
        _affinity_term(ctx, t, f"{field}[{i}]", namespace) for i, t in enumerate(ctx.listing(raw, field))
    )


def _weighted_terms(
    ctx: Ctx, raw: Any, field: str, namespace: str
) -> tuple[tuple[int, PodAffinityTerm], ...]:
    """Preferred (anti-)affinity terms with their weights (1-100), heaviest first."""
    out = []
    for i, item in enumerate(ctx.listing(raw, field)):
        item = ctx.mapping(item, f"{field}[{i}]")
        weight = ctx.integer(item.get("weight", 1), f"{field}[{i}].weight", 1, 100)
        out.append(
            (
                weight,
                _affinity_term(ctx, item.get("podAffinityTerm"), f"{field}[{i}].podAffinityTerm", namespace),
            )
        )
    out.sort(key=lambda w: -w[0])
    return tuple(out)


def _spread(ctx: Ctx, tsc: Any, path: str, labels: Mapping[str, str]) -> TopologySpread:
    tsc = ctx.mapping(tsc, path)
    key = tsc.get("topologyKey")
    if not key or not isinstance(key, str):
        raise ctx.error(f"{path}.topologyKey", "is required")
    when = tsc.get("whenUnsatisfiable") or "DoNotSchedule"
    if when not in ("DoNotSchedule", "ScheduleAnyway"):
        raise ctx.error(f"{path}.whenUnsatisfiable", f"{shown(when)} is not DoNotSchedule or ScheduleAnyway")
    sel = _term_selector(ctx, tsc.get("labelSelector"), f"{path}.labelSelector")
    keys = [str(k) for k in ctx.listing(tsc.get("matchLabelKeys"), f"{path}.matchLabelKeys")]
    if keys:
        extra = tuple((k, labels[k]) for k in keys if k in labels)
        sel = LabelSelector(tuple(sorted(sel.match_labels + extra)), sel.match_expressions, sel.nothing)
    return TopologySpread(
        ctx.integer(tsc.get("maxSkew", 1), f"{path}.maxSkew", 1),
        key,
        when,
        sel,
        ctx.integer(tsc.get("minDomains", 1), f"{path}.minDomains", 1),
    )


def _host_ports(ctx: Ctx, spec: Mapping[str, Any], field: str) -> tuple[HostPort, ...]:
    ports = []
    for i, c in enumerate(ctx.listing(spec.get("containers"), f"{field}.containers")):
        path = f"{field}.containers[{i}]"
        for j, p in enumerate(ctx.listing(ctx.mapping(c, path).get("ports"), f"{path}.ports")):
            p = ctx.mapping(p, f"{path}.ports[{j}]")
            if p.get("hostPort"):
                port = ctx.integer(p["hostPort"], f"{path}.ports[{j}].hostPort", 1, 65535)
                ports.append(HostPort(port, str(p.get("protocol") or "TCP"), str(p.get("hostIP") or "")))
    return tuple(ports)


def _volumes(ctx: Ctx, spec: Mapping[str, Any], field: str) -> tuple[PodVolume, ...]:
    """The volumes that may bind the pod to a topology: claims it names, generic ephemeral volumes."""
    out = []
    for i, vol in enumerate(ctx.listing(spec.get("volumes"), f"{field}.volumes")):
        path = f"{field}.volumes[{i}]"
        vol = ctx.mapping(vol, path)
        claim = ctx.mapping(vol.get("persistentVolumeClaim"), f"{path}.persistentVolumeClaim")
        if claim:
            name = claim.get("claimName")
            if not name or not isinstance(name, str):
                raise ctx.error(f"{path}.persistentVolumeClaim.claimName", "is required")
            out.append(PodVolume(name))
        ephemeral = ctx.mapping(vol.get("ephemeral"), f"{path}.ephemeral")
        if ephemeral:
            tpl = ctx.mapping(ephemeral.get("volumeClaimTemplate"), f"{path}.ephemeral.volumeClaimTemplate")
            tspec = ctx.mapping(tpl.get("spec"), f"{path}.ephemeral.volumeClaimTemplate.spec")
            sc = tspec.get("storageClassName")
            out.append(PodVolume(str(vol.get("name") or ""), True, None if sc is None else str(sc)))
    return tuple(out)


def parse_pod_spec(
    ctx: Ctx,
    namespace: str,
    name: str,
    labels: dict[str, str],
    spec: Any,
    field: str,
    owner: str = "",
    nominated: str = "",
    planned: str = "",
) -> Pod:
    spec = ctx.mapping(spec, field)
    affinity = ctx.mapping(spec.get("affinity"), f"{field}.affinity")
    terms, preferred = _node_affinity(ctx, spec, affinity, field)
    pod_aff = ctx.mapping(affinity.get("podAffinity"), f"{field}.affinity.podAffinity")
    anti = ctx.mapping(affinity.get("podAntiAffinity"), f"{field}.affinity.podAntiAffinity")
    tpath = f"{field}.topologySpreadConstraints"
    spreads = ctx.listing(spec.get("topologySpreadConstraints"), tpath)
    return Pod(
        namespace=namespace,
        name=name,
        labels=labels,
        requests=pod_requests(ctx, spec, field),
        node_affinity=terms,
        preferred_node_affinity=preferred,
        tolerations=tolerations(ctx, spec.get("tolerations"), f"{field}.tolerations"),
        pod_affinity=_affinity_terms(ctx, pod_aff.get(RD), f"{field}.affinity.podAffinity.{RD}", namespace),
        pod_anti_affinity=_affinity_terms(
            ctx, anti.get(RD), f"{field}.affinity.podAntiAffinity.{RD}", namespace
        ),
        topology_spread=tuple(_spread(ctx, t, f"{tpath}[{i}]", labels) for i, t in enumerate(spreads)),
        host_ports=_host_ports(ctx, spec, field),
        node_name=ctx.text(spec.get("nodeName"), f"{field}.nodeName"),
        owner=owner,
        preferred_pod_affinity=_weighted_terms(
            ctx, pod_aff.get(PD), f"{field}.affinity.podAffinity.{PD}", namespace
        ),
        preferred_pod_anti_affinity=_weighted_terms(
            ctx, anti.get(PD), f"{field}.affinity.podAntiAffinity.{PD}", namespace
        ),
        volumes=_volumes(ctx, spec, field),
        nominated_node=nominated,
        planned_node=planned,
    )


_READ_WHOLE = ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints", "overhead")
_READ_OF_ITEMS = {
    "containers": ("resources", "ports"),
    "initContainers": ("resources", "restartPolicy"),
    "volumes": ("persistentVolumeClaim", "ephemeral"),
}


def what_is_read(spec: dict[str, Any]) -> dict[str, Any]:
    """The part of a pod ``spec`` that :func:`parse_pod_spec` reads, its ``nodeName`` aside: every field it
    reads kept where it is (list items stay at their index, a value of the wrong type stays as it is), so
    parsing this gives the same pod, or the same error, as parsing ``spec``. The rest (images, env, probes,
    mounts, the service account token volume a pod gets named at random, a DaemonSet pod's ``matchFields``
    on its own node's name, which scheduling does not read) would make the spec of every replica differ.
    Keep it in step with what the parser reads."""
    out = {key: spec[key] for key in _READ_WHOLE if key in spec}
    for key, fields in _READ_OF_ITEMS.items():
        items = spec.get(key)
        if type(items) is list:
            out[key] = [_item_read(item, fields) for item in items]
        elif key in spec:
            out[key] = items
    if "affinity" in out:
        out["affinity"] = _without_match_fields(out["affinity"])
    return out


def _item_read(item: Any, fields: tuple[str, ...]) -> Any:
    if type(item) is not dict:
        return item
    found = {field: item[field] for field in fields if field in item}
    if "ephemeral" in found and "name" in item:  # a generic ephemeral volume's claim is named after it
        found["name"] = item["name"]
    return found


def _without_match_fields(affinity: Any) -> Any:
    """``affinity`` without the ``matchFields`` of its required node terms (never read: a DaemonSet pod's
    name the node it runs on), when it is laid out as Kubernetes lays it out; else as it is."""
    node_aff = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_aff.get(RD) if isinstance(node_aff, dict) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list) or not any(isinstance(t, dict) and "matchFields" in t for t in terms):
        return affinity
    assert isinstance(node_aff, dict) and isinstance(required, dict)
    kept = [{k: v for k, v in t.items() if k != "matchFields"} if isinstance(t, dict) else t for t in terms]
    return {**affinity, "nodeAffinity": {**node_aff, RD: {**required, "nodeSelectorTerms": kept}}}


class SpecCache:
    """Pods parsed once per identical (namespace, labels, what scheduling reads of the spec): a replica is
    the cached pod renamed.

    The key is the exact encoding of what is read (:func:`what_is_read`; msgpack keeps types apart: ``1``
    and ``"1"``, ``1`` and ``True``), so two specs share a parse only when what is read of them is the same
    data; one that cannot be encoded is parsed every time. A bound pod's ``nodeName`` (a string) is left out
    of the key and set on the copy: the replicas of a workload are spread over many nodes, and a scheduler
    rebuilt from a snapshot parses every bound pod of the cluster once. At most :data:`SIZE` specs are kept,
    the least recently used going first.
    """

    SIZE = 4096

    def __init__(self) -> None:
        self._pods: OrderedDict[bytes, Pod] = OrderedDict()
        self._encode = msgspec.msgpack.Encoder().encode

    def pod(
        self, ctx: Ctx, namespace: str, name: str, labels: dict[str, str], spec: Any, field: str, **extra: str
    ) -> Pod:
        node = None
        if type(spec) is dict:
            node = spec.get("nodeName")
            read = what_is_read(spec)
            if isinstance(node, str):
                spec = read
            else:  # absent, or not a string: parsed (and refused) with the rest
                spec = {**read, "nodeName": node} if "nodeName" in spec else read
                node = None
        try:
            key = self._encode((ctx.kind, namespace, labels, spec, field, extra))
        except (TypeError, ValueError, OverflowError):  # not plain data (a YAML timestamp, a set...)
            return placed(parse_pod_spec(ctx, namespace, name, labels, spec, field, **extra), name, node)
        found = self._pods.get(key)
        if found is None:
            found = derived(parse_pod_spec(ctx, namespace, name, labels, spec, field, **extra))
            self._pods[key] = found
            if len(self._pods) > self.SIZE:
                self._pods.popitem(last=False)
        else:
            self._pods.move_to_end(key)
        return placed(found, name, node)


def derived(pod: Pod) -> Pod:
    """``pod`` with what the solver derives from its spec worked out (its label set, shape, whether it limits
    its node or names a topology key), so that every copy :func:`placed` makes of it shares them: one shape
    object for all the replicas of a spec."""
    for cached in ("label_set", "shape", "limits_nothing", "topology_free"):
        getattr(pod, cached)
    return pod


def placed(pod: Pod, name: str, node: str | None = None) -> Pod:
    """``pod`` as the replica ``name``, bound to ``node`` when it is: a shallow copy sharing every parsed
    field (and what :func:`derived` cached) with the name, key and node set (``dataclasses.replace`` would
    build it field by field: a fifth of parsing a bound pod)."""
    if pod.name == name and (node is None or pod.node_name == node):
        return pod
    copy: Pod = object.__new__(Pod)
    fields = copy.__dict__
    fields.update(pod.__dict__)
    fields["name"] = name
    fields["key"] = f"{pod.namespace}/{name}"
    if node is not None:
        fields["node_name"] = node
    return copy
