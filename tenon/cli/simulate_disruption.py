"""``tenon simulate --disruption``: the disruption decisions tenon would take on a cluster, without one.

``tenon simulate --disruption -f cluster.yaml [--now RFC3339] [--rounds N|until-stable] [-o json]`` reads
Nodes, bound and pending Pods, NodeClaims, NodePools, NodeClasses, MachineDeployments or InstanceCatalogs
(prices), DaemonSets and PodDisruptionBudgets (files are read as ``tenon simulate`` reads them: bad input is
one line naming it, exit 2) and plays disruption rounds with the disruption service's own code
(:mod:`tenon.domain.disruption`): expiration, then emptiness, drift, multi- and single-node consolidation in
Karpenter's order, within budgets, PDBs and ``do-not-disrupt``.

JSON: ``rounds[]`` of ``{method, reason, candidates[] (Node names), replacements[] (name, nodePool,
instanceType, zone, capacityType, pricePerHour), podsMoved[], savingsPerHour, blocked[] (node, why)}``, then
``finalNodes[]`` (``name``, ``instanceType``, ``pricePerHour``, ``pods[]`` as ``namespace/name``) and
``finalPricePerHour``; ``priceBefore`` is the price of the nodes as given. ``--now`` defaults to the current
time (ages, ``consolidateAfter``, ``expireAfter`` and budget schedules are judged at it).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

import msgspec

from tenon.core import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--disruption", action="store_true", help="print what disruption would do, round after round"
    )
    parser.add_argument("--now", help="with --disruption: the moment to judge at (RFC 3339; default: now)")
    parser.add_argument(
        "--rounds",
        default="until-stable",
        help="with --disruption: how many rounds (a number, or until-stable, the default)",
    )


def _now(text: str | None) -> datetime:
    if not text:
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--now {text!r} is not an RFC 3339 time like 2026-11-30T12:00:00Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _rounds(text: str) -> int | None:
    if text == "until-stable":
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"--rounds {text!r} is neither a positive number nor until-stable")
    return int(text)


def read_objects(paths: list[str]) -> list[dict[str, Any]]:
    from tenon.cli.simulate import ReadError, documents

    objects = []
    for path in paths:
        for source, index, doc in documents(path):
            if not isinstance(doc, dict):
                raise ReadError(f"{source} document {index}: not a Kubernetes object (a map)")
            if doc.get("kind") == "List":
                objects += [item for item in doc.get("items") or [] if isinstance(item, dict)]
            else:
                objects.append(doc)
    return objects


def run(args: argparse.Namespace) -> int:
    from tenon.cli.simulate import ReadError

    # here, not at the top: every ``tenon simulate`` registers this module's arguments, and the disruption
    # domain's imports would cost it ~70 ms
    from tenon.domain.disruption.whatif import run as run_rounds

    try:
        now, rounds = _now(args.now), _rounds(args.rounds)
        result = run_rounds(read_objects(args.filename), now, rounds)
    except (ReadError, InputError, ValueError) as err:
        print(f"tenon simulate: {err}", file=sys.stderr)
        return 2
    if args.output == "json":
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n")
        sys.stdout.flush()
    else:
        print(render_table(result))
    return 0


def render_table(result: dict[str, Any]) -> str:
    lines = [f"Price before: {result['priceBefore']:.4f}/h"]
    for number, played in enumerate(result["rounds"], 1):
        new = ", ".join(
            f"{r['name']} ({r['instanceType']}, {r['pricePerHour']:.4f}/h)" for r in played["replacements"]
        )
        lines.append(
            f"Round {number}: {played['method']} ({played['reason']}): {', '.join(played['candidates'])}"
            + (f" -> {new}" if new else "")
            + f", saves {played['savingsPerHour']:.4f}/h, {len(played['podsMoved'])} pod(s) moved"
        )
        lines += [f"  kept {b['node']}: {b['why']}" for b in played["blocked"]]
    if not result["rounds"]:
        lines.append("Nothing to disrupt.")
    lines.append(f"Final nodes ({len(result['finalNodes'])}):")
    lines += [
        f"  {n['name']} {n['instanceType']} {n['pricePerHour']:.4f}/h: {len(n['pods'])} pod(s)"
        for n in result["finalNodes"]
    ]
    lines.append(f"Final price: {result['finalPricePerHour']:.4f}/h")
    return "\n".join(lines)
