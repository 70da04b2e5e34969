"""The ``tenon`` command line: one console script, one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets ``func`` to a callable
taking the parsed ``argparse.Namespace`` and returning the process exit code. ``main`` imports them lazily so
that ``tenon tap --help`` does not pay for the scheduling library or the sandbox.
"""
