"""``tenon simulate``: run the scheduler on YAML/JSON files and print the plan (what-if tool).

``tenon simulate -f cluster.yaml -f pods.yaml [-o table|json]`` reads multi-document YAML or JSON (``-`` is
stdin) of Kubernetes objects, runs :func:`tenon.core.solve` and prints the plan: new NodeClaims with
their type, zone, capacity type, price and pods; pods placed on existing nodes; pods that cannot run with the
reason per NodePool. Exit 0 when a plan is made (even with unschedulable pods), 2 on invalid input with a
message naming the file, the document index and the field. See ``docs/simulate.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

import yaml

from tenon.core import InputError, parse_objects, solve
from tenon.core.plan import Plan


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
    parser.set_defaults(func=run)


class _ReadError(Exception):
    pass


def _documents(path: str) -> Iterator[tuple[str, int, Any]]:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as err:
        raise _ReadError(f"{path}: cannot read: {err.strerror or err}") from None
    index = 0
    try:
        for index, doc in enumerate(yaml.safe_load_all(text)):
            if doc is not None:
                yield path, index, doc
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise _ReadError(
            f"{path} document {index + (1 if index else 0)}{where}: not valid YAML/JSON: {problem}"
        ) from None


def run(args: argparse.Namespace) -> int:
    try:
        docs = [doc for path in args.filename for doc in _documents(path)]
        inputs = parse_objects(docs)
    except (_ReadError, InputError) as err:
        print(f"tenon simulate: {err}", file=sys.stderr)
        return 2
    plan = solve(inputs)
    if args.output == "json":
        print(json.dumps(plan.to_json(), indent=2))
    else:
        print(render_table(plan))
    return 0


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
    if plan.unschedulable:
        lines.append(f"Cannot run ({len(plan.unschedulable)}):")
        lines += [f"  {u.pod}: {u.reason}" for u in plan.unschedulable]
    for s in plan.skipped:
        lines.append(f"Skipped: {s}")
    lines.append(f"Total price: {plan.total_price:.4f}/h")
    return "\n".join(lines)
