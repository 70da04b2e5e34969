"""The development commands (``tenon up``, ``tenon sandbox``, ``tenon broker``), each a module with
``register(subparsers)`` like :mod:`tenon.cli`'s; ``pyproject.toml`` plugs them in as ``tenon.commands``."""
