"""The core's public API is small: ``tenon.core``, ``tenon.core.quantities`` and ``tenon.core.wellknown``.

Every other core module is internal, and the import-linter contract in ``pyproject.toml`` forbids the layers
above to import it. A new core module that is not listed there would be public by accident: this test names
it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = {"__init__", "quantities", "wellknown"}


def test_every_internal_core_module_is_forbidden_to_the_layers_above() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    internal = next(c for c in contracts if c["name"].startswith("the core's internals stay internal"))
    forbidden = set(internal["forbidden_modules"])
    modules = {f"tenon.core.{path.stem}" for path in (ROOT / "tenon" / "core").glob("*.py")}
    missing = sorted(m for m in modules if m.rsplit(".", 1)[-1] not in PUBLIC and m not in forbidden)
    assert not missing, f"core modules public by accident (add them to pyproject.toml): {missing}"
    stale = sorted(forbidden - modules)
    assert not stale, f"the contract names core modules that no longer exist: {stale}"
