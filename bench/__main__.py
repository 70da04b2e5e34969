"""``make bench``: every speed, quality and memory target of the project, measured in one run.

Each suite is a module in this package exposing ``run(quick: bool) -> Suite``. A suite returns its figures as
plain JSON-able data plus the rows of a table for people. Results of all suites are written to
``bench/results.json`` (one key per suite) and printed. ``--only NAME`` runs one suite (``--only scale``, the
10,000-pod run, runs only when named); ``--quick`` shrinks sizes for a smoke run. Targets are reported as
pass/fail rows, never asserted in unit tests. Before each suite, the machine's speed at that moment is read
and printed with it (:mod:`bench.machine`): this machine's speed swings, and a figure is read beside it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.machine import reference_ms
from bench.suite import Suite

SUITES: tuple[str, ...] = (
    "eventlog",
    "scheduling",
    "sandbox",
    "sandbox_controllers",
    "launcher_capi",
    "rebuild",
    "disruption",
    "failover",
    "e2e",
    "ec2",
    "scale",
)

DEFAULT_SUITES = tuple(name for name in SUITES if name != "scale")
"""What ``make bench`` runs without ``--only``: the scale run (3-10 minutes at full size, by the machine's
speed) only when asked."""

RESULTS_PATH = Path(__file__).parent / "results.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", action="append", choices=SUITES, help="run only this suite (repeatable)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--output", type=Path, default=RESULTS_PATH, help="where to write the JSON results")
    args = parser.parse_args(argv)

    console = Console()
    reference: dict[str, float] = {}
    results: dict[str, object] = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "reference_ms": reference,
        },
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
    }
    failed_targets = 0
    for name in args.only or DEFAULT_SUITES:
        module = importlib.import_module(f"bench.{name}")
        console.rule(f"[bold]{name}")
        reference[name] = reference_ms()
        console.print(f"machine: the reference work took {reference[name]} ms of CPU (bench/machine.py)")
        suite: Suite = module.run(args.quick)
        results[name] = suite.data
        table = Table(*suite.columns, title=suite.title)
        for row in suite.rows:
            table.add_row(*(str(cell) for cell in row))
        console.print(table)
        for target in suite.targets:
            mark = "[green]PASS" if target.met else "[red]MISS"
            console.print(f"{mark}[/] {target.name}: {target.measured} (target {target.goal})")
            failed_targets += 0 if target.met else 1
        results[name] = {**suite.data, "targets": [t.as_dict() for t in suite.targets]}
        args.output.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    console.print(f"results written to {args.output}; targets missed: {failed_targets}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
