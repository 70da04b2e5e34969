"""``tenon simulate`` as a whole command on Karpenter's benchmark mix: the figures a user waits for.

The library-only solve is measured beside it (bench/scheduling.py, fake-400); here the same 5,000 and 20,000
pods (:func:`bench.scheduling_workloads.diverse_pods`, one NodePool, the fake-400 catalog) are written to
files, as YAML and as JSON, and the command is run in a fresh process, start to exit: interpreter, imports,
reading, parsing, solving and printing the JSON plan. Two forms:

* ``tenon simulate`` (the console script: what a user types; it also pays for ``tenon``'s command table),
* ``python -m tenon.cli.simulate`` (the command alone).

Each is run :data:`RUNS` times; the best wall time is the figure (the machine is shared), with the CPU time of
that run (user + system of the child) beside it. Targets (issue 10): 5,000 pods <= 1.5 s, 20,000 <= 5 s.

The commands run as an installed tenon runs: with its modules' bytecode cached (``pip install`` compiles
them). The children get a cache of their own (``PYTHONPYCACHEPREFIX`` in the run's temporary folder, filled
by one untimed run of each command) and never ``PYTHONDONTWRITEBYTECODE``: with that variable set, as it is
on some development machines and CI images, an editable checkout compiles every module it imports on every
run, 0.1-0.15 s that no user of an installed tenon pays.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.scheduling_workloads import diverse_pods, node_pool
from bench.suite import Suite, Target
from tenon.core.catalogs_generated import fake_400

RUNS = 3
LIMITS = {5000: 1.5, 20000: 5.0}


def _write(folder: Path, pods: int) -> dict[str, Path]:
    docs: list[dict[str, Any]] = [node_pool(), fake_400(), *diverse_pods(pods)]
    paths = {"yaml": folder / f"mix-{pods}.yaml", "json": folder / f"mix-{pods}.json"}
    with open(paths["yaml"], "w") as out:
        yaml.dump_all(docs, out, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    with open(paths["json"], "w") as out:
        json.dump({"apiVersion": "v1", "kind": "List", "items": docs}, out)
    return paths


def _bytecode_cached(folder: Path) -> dict[str, str]:
    """The environment of a child whose modules' bytecode is cached under ``folder`` (see the module)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(folder / "pycache")}


def _run_once(command: list[str], env: dict[str, str]) -> tuple[float, float, dict[str, Any]]:
    """Wall and CPU seconds of one run of ``command``, and the plan it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(done.stdout)


def _commands(path: Path) -> dict[str, list[str]]:
    tenon = str(Path(sys.executable).parent / "tenon")
    args = ["-f", str(path), "-o", "json"]
    return {
        "tenon simulate": [tenon, "simulate", *args],
        "python -m tenon.cli.simulate": [sys.executable, "-m", "tenon.cli.simulate", *args],
    }


def _measure(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    runs = [_run_once(command, env) for _ in range(RUNS)]
    wall, cpu, plan = min(runs, key=lambda r: r[0])
    placed = sum(len(nc["pods"]) for nc in plan["nodeClaims"])
    return {"wall_s": wall, "cpu_s": cpu, "placed": placed, "nodes": len(plan["nodeClaims"])}


def _report(suite: Suite, row: dict[str, Any]) -> None:
    pods, fmt, form = row["pods"], row["format"], row["command"]
    measured = f"{row['wall_s']:.2f} s wall ({row['cpu_s']:.2f} s CPU)"
    suite.rows.append(
        [
            f"CLI: {form} -f {fmt}, {pods} pods",
            measured,
            f"best of {RUNS}, start to exit; placed {row['placed']}/{pods}, {row['nodes']} nodes",
        ]
    )
    if form == "tenon simulate":
        limit = LIMITS[pods]
        met = row["wall_s"] <= limit and row["placed"] == pods
        suite.targets.append(
            Target(f"tenon simulate -f ({fmt}) {pods} pods, whole command", f"<= {limit} s", measured, met)
        )


def run_cli(suite: Suite, quick: bool) -> None:
    """Every (size, format, form) measured, reported and kept under ``cli`` in the results."""
    results = []
    with tempfile.TemporaryDirectory(prefix="tenon-bench-cli-") as folder:
        env = _bytecode_cached(Path(folder))
        warmed = False
        for pods in LIMITS:
            if quick and pods > 5000:
                continue
            for fmt, path in _write(Path(folder), pods).items():
                if not warmed:  # fills the bytecode cache: every later run reads it
                    for command in _commands(path).values():
                        subprocess.run(command, capture_output=True, check=True, env=env)
                    warmed = True
                for form, command in _commands(path).items():
                    row = {"pods": pods, "format": fmt, "command": form, **_measure(command, env)}
                    _report(suite, row)
                    results.append(row)
    suite.data["cli"] = results
