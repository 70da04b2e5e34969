"""``tenon sandbox``: a local Kubernetes API (workload and management clusters), simulated nodes and machines.

Writes two kubeconfigs (workload and management cluster) and serves until SIGINT/SIGTERM. Point kubectl or
tenon's services at them: ``kubectl --kubeconfig ~/.tenon/sandbox/workload.kubeconfig get nodes``. The
``fast`` profile makes everything happen in under a second (tests); ``field`` replays the timeline measured in
the field (machine at +64 s, node registered +72 s, Ready +139 s), optionally sped up with ``--time-scale``.
The workload cluster starts with tenon's CustomResourceDefinitions installed (``deploy/crds``: NodePool,
NodeClaim, EC2NodeClass, ClusterAPINodeClass, InstanceCatalog), so objects of those kinds are validated,
pruned and defaulted as a real cluster would; ``--crds`` installs others instead, ``--no-crds`` none (the
kinds are then served without a schema). A CRD that would be refused stops the start (exit 2).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from devtools.sandbox.profiles import PROFILES
from devtools.sandbox.runtime import DEFAULT_DIR, DEPLOY_CRDS, Sandbox, SandboxConfig
from devtools.sandbox.runtime import run as run_sandbox


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--time-scale: {text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"--time-scale: must be a positive finite number, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port: {text!r} is not an integer") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port: {value} is outside 0-65535")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sandbox", help="run a local Kubernetes API with simulated nodes and machines", description=__doc__
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument(
        "--port",
        type=_port,
        default=6443,
        help="workload cluster API port, 0 for any free port (default: %(default)s)",
    )
    parser.add_argument(
        "--management-port",
        type=_port,
        default=6444,
        help="management (Cluster API) cluster port, 0 for any free port (default: %(default)s)",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=DEFAULT_DIR / "workload.kubeconfig",
        help="where to write the workload cluster's kubeconfig (default: %(default)s)",
    )
    parser.add_argument(
        "--management-kubeconfig",
        type=Path,
        default=DEFAULT_DIR / "management.kubeconfig",
        help="where to write the management cluster's kubeconfig (default: %(default)s)",
    )
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="field",
        help="timing of simulated machines, nodes and pods (default: %(default)s)",
    )
    parser.add_argument(
        "--time-scale",
        type=_positive_float,
        default=1.0,
        help="multiply every profile duration by this factor (default: %(default)s)",
    )
    parser.add_argument(
        "--no-controllers",
        action="store_true",
        help="serve the API only: no scheduler, kubelet or Cluster API simulation",
    )
    parser.add_argument(
        "--watch-max-seconds",
        type=_positive_float,
        default=300.0,
        help="end watches without timeoutSeconds after at most this long (default: %(default)s)",
    )
    parser.add_argument(
        "--crds",
        type=Path,
        action="append",
        metavar="PATH",
        help="install the CustomResourceDefinitions in this file or directory in the workload cluster "
        f"(repeatable; default: {DEPLOY_CRDS})",
    )
    parser.add_argument(
        "--no-crds",
        action="store_true",
        help="install no CRDs: Karpenter's kinds are served without a schema, accepting any body",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = SandboxConfig(
        host=args.host,
        port=args.port,
        management_port=args.management_port,
        kubeconfig=args.kubeconfig,
        management_kubeconfig=args.management_kubeconfig,
        profile=args.profile,
        time_scale=args.time_scale,
        controllers=not args.no_controllers,
        watch_max_seconds=args.watch_max_seconds,
        crds=() if args.no_crds else tuple(args.crds or (DEPLOY_CRDS,)),
    )

    def announce(sandbox: Sandbox) -> None:
        print(
            f"tenon sandbox: workload cluster {sandbox.workload_url} "
            f"(kubeconfig {sandbox.workload_kubeconfig})\n"
            f"tenon sandbox: management cluster {sandbox.management_url} "
            f"(kubeconfig {sandbox.management_kubeconfig})\n"
            f"tenon sandbox: profile {sandbox.profile.name} x{args.time_scale}, controllers "
            f"{'on' if sandbox.controllers_running else 'off'}, "
            f"{len(sandbox.installed_crds)} CRDs installed; Ctrl-C stops it",
            flush=True,
        )

    code = run_sandbox(config, announce)
    if code:
        print("tenon sandbox: stopped with an error", file=sys.stderr)
    return code
