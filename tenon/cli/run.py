"""``tenon run SERVICE [OPTIONS]``: run one of tenon's services in the foreground.

Same as ``python -m tenon.services.<package>``; every service reads the broker from ``TENON_NATS_*`` and its
clusters from ``TENON_KUBECONFIG`` / ``TENON_MANAGEMENT_KUBECONFIG`` (or flags, see ``tenon run SERVICE -h``),
and runs as the leader of its group, so starting two is safe.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

SERVICES: dict[str, str] = {
    "pod-watcher": "tenon.services.pod_watcher.__main__",
    "scheduler": "tenon.services.scheduler.__main__",
    "launcher-capi": "tenon.services.launcher_capi.__main__",
    "disruption": "tenon.services.disruption.__main__",
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run one service in the foreground",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("service", choices=sorted(SERVICES), help="which service")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the service's own options")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(SERVICES[args.service])
    code: int = module.main(args.options)
    return code
