"""``tenon run SERVICE [OPTIONS]``: run one of tenon's services in the foreground.

Every service reads its settings from flags or the environment (``tenon run SERVICE --help`` lists them, with
their variables and defaults) and runs as the leader of its group, so starting two is safe.
"""

from __future__ import annotations

import argparse
from typing import Any

from tenon.services import SERVICES, definition


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run one service in the foreground",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("service", choices=list(SERVICES), help="which service")
    parser.add_argument(
        "options", nargs=argparse.REMAINDER, help="the service's own options (see SERVICE --help)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tenon.runtime.service import main

    return main(definition(args.service), args.options)
