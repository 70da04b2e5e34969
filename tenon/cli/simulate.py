"""``tenon simulate``: run the scheduler on YAML/JSON files and print the plan (what-if tool).

``tenon simulate -f cluster.yaml -f pods.yaml [-o table|json]`` reads multi-document YAML or JSON (``-`` is
stdin) of Kubernetes objects, runs :func:`tenon.core.solve` and prints the plan: new NodeClaims with
their type, zone, capacity type, price and pods; pods placed on existing nodes; pods that cannot run with the
reason per NodePool. Exit 0 when a plan is made (even with unschedulable pods), 2 on invalid input with one
line naming the file, the document index, the object and the field. See ``docs/simulate.md``.

Reading is built for hostile input as much as for speed (every limit below is a one-line error, exit 2):

* bytes: at most :data:`MAX_BYTES`, UTF-8 (a BOM is dropped), anything else named with the offset of the
  first bad byte;
* JSON (a file starting with ``{`` or ``[``) is decoded by msgspec, YAML by libyaml (PyYAML's C loader when
  it is installed) with a lean constructor: plain scalars resolved once per distinct text, maps and lists
  built directly;
* a key twice in one map is refused (YAML and JSON keep one silently; Kubernetes' strict decoding refuses
  it), nesting deeper than :data:`MAX_DEPTH`, and YAML aliases that would expand to more than
  :data:`MAX_VALUES` values (the "billion laughs");
* objects are parsed one at a time, and at most :data:`tenon.core.MAX_PODS` pods in all: a
  ``replicas: 1000000000`` is refused naming its field, never expanded;
* a MachineDeployment whose annotations cannot be read (a 0-CPU machine, a negative max size, a price that is
  not a finite number) is refused naming the annotation (the scheduler service skips it instead);
* the JSON printed is strict JSON: no ``NaN`` or ``Infinity`` can reach it (prices are finite by then).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from tenon.core import MAX_PODS, ClusterInput, InputError, Plan, assemble, one_line, parse_object, solve
from tenon.runtime.collector import collector_paused

MAX_BYTES = 256 * 2**20
MAX_DEPTH = 100
"""Levels of nesting: Kubernetes objects use about twenty; this bounds the reader's own recursion."""
MAX_VALUES = 20_000_000
"""Values a YAML document may expand to through aliases (the whole 20,000-pod benchmark is ~2 million)."""

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="print the nodes tenon would buy for the given objects (what-if, no cluster needed)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML or JSON file of Kubernetes objects (repeatable; - for stdin)",
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    from tenon.cli import simulate_disruption  # here, not at the top: the plan alone does not pay for it

    simulate_disruption.add_arguments(parser)
    parser.set_defaults(func=run)


class ReadError(Exception):
    """A file that cannot be read as YAML or JSON documents; ``str()`` is one line naming it."""


# -- bytes and text ------------------------------------------------------------------------------------------


def _read_bytes(path: str) -> bytes:
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_BYTES + 1)
    except OSError as err:
        raise ReadError(f"{path}: cannot read: {err.strerror or err}") from None
    if len(data) > MAX_BYTES:
        raise ReadError(f"{path}: larger than {MAX_BYTES // 2**20} MiB")
    return data


def _text(path: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        bad = data[err.start : err.start + 1].hex()
        raise ReadError(
            f"{path}: not UTF-8 text (byte 0x{bad} at offset {err.start}): is it a binary file?"
        ) from None


# -- JSON ----------------------------------------------------------------------------------------------------


def _count_keys(doc: Any) -> int:
    """Keys of every map in ``doc``, walked level by level without recursion (each level's values gathered
    in bulk: a stack of (value, depth) pairs took 2.5 times as long); :class:`_TooDeepJSON` past
    ``MAX_DEPTH``."""
    count, level, depth = 0, [doc], 0
    while level:
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is dict:
                if depth >= MAX_DEPTH:
                    raise _TooDeepJSON
                count += len(item)
                below += item.values()
            elif kind is list:
                if depth >= MAX_DEPTH:
                    raise _TooDeepJSON
                below += item
        level, depth = below, depth + 1
    return count


class _TooDeepJSON(Exception):
    pass


def _json_documents(path: str, data: bytes) -> list[Any] | None:
    """The document of a JSON file; ``None`` when it is not valid JSON (YAML, a superset, reads it then, and
    says where it is wrong)."""
    too_deep = f"{path}: nested more than {MAX_DEPTH} levels deep (Kubernetes objects are about twenty)"
    try:
        doc = msgspec.json.decode(data)
        keys = _count_keys(doc)
    except (RecursionError, _TooDeepJSON):
        raise ReadError(too_deep) from None
    except msgspec.DecodeError:
        return None
    # A key given twice is kept once: fewer keys decoded than written. Keys written are counted as '":'
    # (as kubectl and most writers put them); when that count differs, an exact look decides.
    if keys != data.count(b'":'):
        duplicate = _json_duplicate(data)
        if duplicate:
            raise ReadError(f"{path}: {duplicate}")
    return [doc]


def _json_duplicate(data: bytes) -> str:
    """The first key given twice in one JSON map, in words ("" when there is none)."""
    import json  # only on this error path

    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen and not found:
                found.append(key)
            seen[key] = value
        return seen

    json.loads(data, object_pairs_hook=pairs)
    if not found:
        return ""
    return f"key {found[0]!r} appears twice in one map (Kubernetes refuses duplicate fields: keep one)"


# -- YAML ----------------------------------------------------------------------------------------------------


class _Reader(_Loader):  # type: ignore[valid-type, misc]
    """libyaml's parser with a lean constructor: scalars resolved once per distinct text, maps (duplicate keys
    refused) and lists built directly, nesting and alias expansion bounded. Anything unusual (timestamps,
    binary, merge keys, sets) goes to PyYAML's own constructor."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._plain: dict[str, str] = {}
        self._built: dict[int, tuple[Any, int]] = {}
        # No path resolvers here: libyaml's calls to track the path cost a Python call per node otherwise.
        self.descend_resolver: Any = {}.get  # takes (node, index), returns None, in C
        self.ascend_resolver: Any = [].clear  # takes nothing, returns None, in C

    def resolve(self, kind: type[Node], value: str, implicit: tuple[bool, bool]) -> str:
        """The tag of a node without one: a plain scalar's by its text (once per distinct text), anything
        quoted is a string, collections are maps and lists."""
        if kind is ScalarNode:
            if not implicit[0]:
                return _STR
            tag = self._plain.get(value)
            if tag is None:
                tag = self._plain[value] = str(super().resolve(kind, value, implicit))
            return tag
        return _MAP if kind is MappingNode else _SEQ

    def get_data(self) -> Any:
        node = self.get_node()
        self._built = {}
        value, size = self._build(node, 0)
        self._built = {}
        self.constructed_objects: dict[Any, Any] = {}  # PyYAML's memo, for the nodes it built
        if size > MAX_VALUES:
            raise _TooLarge(node)
        return value

    def _build(self, node: Node, depth: int) -> tuple[Any, int]:
        """The value of ``node`` and how many values it stands for (aliases counted each time)."""
        if node.__class__ is ScalarNode:
            return (node.value if node.tag == _STR else self.construct_object(node, deep=True)), 1
        found = self._built.get(id(node))
        if found is not None:  # an alias: the same value, counted again
            return found
        if depth > MAX_DEPTH:
            raise _TooDeep(node)
        built: tuple[Any, int]
        if node.__class__ is MappingNode and node.tag == _MAP:
            built = self._map(node, depth)
        elif node.__class__ is SequenceNode and node.tag == _SEQ:
            built = self._list(node, depth)
        else:
            built = (self.construct_object(node, deep=True), len(getattr(node, "value", ())) + 1)
        if built[1] > MAX_VALUES:
            raise _TooLarge(node)
        self._built[id(node)] = built
        return built

    def _map(self, node: MappingNode, depth: int) -> tuple[Any, int]:
        out: dict[Any, Any] = {}
        size = 1
        for key_node, value_node in node.value:
            if key_node.__class__ is ScalarNode and key_node.tag == _STR:
                key = key_node.value
            elif key_node.tag == _MERGE:  # "<<: *defaults": PyYAML's constructor merges
                return self.construct_object(node, deep=True), len(node.value) + 1
            else:
                key = self._build(key_node, depth + 1)[0]
                if isinstance(key, list | dict):
                    raise yaml.constructor.ConstructorError(
                        "while reading a map",
                        node.start_mark,
                        "a key is a list or a map",
                        key_node.start_mark,
                    )
            if key in out:
                raise yaml.constructor.ConstructorError(
                    "while reading a map",
                    node.start_mark,
                    f"key {key!r} appears twice (Kubernetes refuses duplicate fields: keep one)",
                    key_node.start_mark,
                )
            out[key], count = self._build(value_node, depth + 1)
            size += count
        return out, size

    def _list(self, node: SequenceNode, depth: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        size = 1
        for item in node.value:
            value, count = self._build(item, depth + 1)
            out.append(value)
            size += count
        return out, size


class _TooDeep(Exception):
    def __init__(self, node: Node):
        self.mark = node.start_mark


class _TooLarge(Exception):
    def __init__(self, node: Node):
        self.mark = node.start_mark


def _yaml_documents(path: str, text: str) -> Iterator[Any]:
    reader = _Reader(text)
    index = 0
    try:
        while reader.check_node():
            yield reader.get_data()
            index += 1
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ReadError(f"{path} document {index}{where}: not valid YAML/JSON: {problem}") from None
    except _TooDeep as err:
        line = err.mark.line + 1
        raise ReadError(
            f"{path} document {index} line {line}: nested more than {MAX_DEPTH} levels deep"
        ) from None
    except _TooLarge as err:
        line = err.mark.line + 1
        raise ReadError(
            f"{path} document {index} line {line}: aliases expand to more than {MAX_VALUES:,} values"
        ) from None
    except RecursionError:
        raise ReadError(f"{path} document {index}: nested too deep") from None
    finally:
        reader.dispose()


def documents(path: str) -> list[tuple[str, int, Any]]:
    """The non-empty documents of one file (or stdin), with their index, as ``parse_object`` takes them."""
    data = _read_bytes(path)
    text = _text(path, data)
    found = _json_documents(path, data) if text.lstrip()[:1] in ("{", "[") else None
    if found is None:
        found = list(_yaml_documents(path, text))
    return [(path, index, doc) for index, doc in enumerate(found) if doc is not None]


# -- objects -------------------------------------------------------------------------------------------------


def read_inputs(paths: list[str]) -> ClusterInput:
    """Every file's objects, parsed one at a time (at most ``MAX_PODS`` pods in all); raises
    :class:`ReadError` or :class:`InputError`."""
    parts = []
    pods = 0
    ec2_nodeclasses: list[tuple[str, int, dict[str, Any]]] = []
    for path in paths:
        for source, index, doc in documents(path):
            part = parse_object(source, index, doc)
            pods += len(part.pods)
            if pods > MAX_PODS:
                raise ReadError(
                    f"{source} document {index}: more than {MAX_PODS:,} pods in all (tenon plans fewer)"
                )
            parts.append(part)
            if isinstance(doc, dict) and doc.get("kind") == "EC2NodeClass":
                ec2_nodeclasses.append((source, index, doc))
    catalogs = {name: found for part in parts for name, found in part.catalogs.items()}  # assemble's merge
    parts += _shipped_ec2_catalogs(ec2_nodeclasses, catalogs)
    inputs = assemble(parts)
    for skipped in inputs.skipped:
        if skipped.field:  # an object that cannot be read, not merely one scheduling does not use
            raise ReadError(f"{skipped.source} ({skipped.kind} {skipped.name}): {skipped.reason}")
    return inputs


def _shipped_ec2_catalogs(
    nodeclasses: list[tuple[str, int, dict[str, Any]]], catalogs: Mapping[str, Any]
) -> list[ClusterInput]:
    """For each EC2NodeClass without an InstanceCatalog of its name among the inputs, the catalog
    launcher-ec2 would build for it from the instance types and prices tenon ships (spot prices estimated),
    so a what-if on Karpenter's manifests plans what the live launcher would buy."""
    missing = [entry for entry in nodeclasses if _name(entry[2]) not in catalogs]
    if not missing:
        return []
    from tenon.services.launcher_ec2.nodeclass import NodeClassInvalid
    from tenon.services.launcher_ec2.shipped import offline_catalog

    parts = []
    for source, index, doc in missing:
        try:
            catalog = offline_catalog(doc)
        except NodeClassInvalid as err:
            raise ReadError(f"{source} document {index}: {err}") from None
        parts.append(parse_object(f"{source} (EC2NodeClass {_name(doc)}: shipped catalog)", index, catalog))
    return parts


def _name(doc: Mapping[str, Any]) -> str:
    metadata = doc.get("metadata")
    return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""


def run(args: argparse.Namespace) -> int:
    if getattr(args, "disruption", False):
        from tenon.cli import simulate_disruption

        return simulate_disruption.run(args)
    # the plan's JSON too: its dicts are made while the inputs are still there for a pass to walk (20,000
    # pods: 0.13 s with the collector paused, 0.22-0.32 s without)
    with collector_paused():
        try:
            inputs = read_inputs(args.filename)
        except (ReadError, InputError) as err:
            print(f"tenon simulate: {one_line(str(err))}", file=sys.stderr)
            return 2
        plan = solve(inputs)
        if args.output == "json":
            sys.stdout.buffer.write(plan_json(plan) + b"\n")
            sys.stdout.flush()
        else:
            print(render_table(plan))
    return 0


def plan_json(plan: Plan) -> bytes:
    """The plan as indented, strict JSON (msgspec writes a non-finite float as ``null``, never ``NaN``)."""
    return msgspec.json.format(msgspec.json.encode(plan.to_json()), indent=2)


def render_table(plan: Plan) -> str:
    lines: list[str] = []
    if plan.node_claims:
        rows = [("NODEPOOL", "INSTANCE TYPE", "ZONE", "CAPACITY", "PRICE/H", "PODS", "FALLBACKS")]
        for nc in plan.node_claims:
            price = f"{nc.price:.4f}" + ("*" if nc.price_estimated else "")
            pods = ", ".join(nc.pods[:3]) + (f" (+{len(nc.pods) - 3})" if len(nc.pods) > 3 else "")
            rows.append(
                (
                    nc.node_pool,
                    nc.instance_type,
                    nc.zone or "-",
                    nc.capacity_type,
                    price,
                    pods,
                    ", ".join(nc.fallbacks[:3]) or "-",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines.append(f"New nodes ({len(plan.node_claims)}):")
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        if any(nc.price_estimated for nc in plan.node_claims):
            lines.append("  * price estimated from resources (no tenon.sh/price-per-hour annotation)")
    else:
        lines.append("New nodes: none")
    for e in plan.existing:
        lines.append(f"On existing {e.kind} {e.name}: {', '.join(e.pods)}")
    for n in plan.nominated:
        lines.append(f"Being placed by the kube-scheduler (nominated to {n.node}): {n.pod}")
    if plan.unschedulable:
        lines.append(f"Cannot run ({len(plan.unschedulable)}):")
        lines += [f"  {u.pod}: {u.reason}" for u in plan.unschedulable]
    for s in plan.skipped:
        lines.append(f"Skipped: {s}")
    lines.append(f"Total price: {plan.total_price:.4f}/h")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m tenon.cli.simulate``: the plan alone, without the rest of ``tenon``'s subcommands (nor
    ``--disruption``: ``tenon simulate --disruption`` has it)."""
    parser = argparse.ArgumentParser(prog="tenon simulate", description=__doc__)
    parser.add_argument("-f", "--filename", action="append", required=True, metavar="FILE")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
