"""``python -m tenon.services.launcher_capi``: the Cluster API launcher as its own process.

Options (flags win over the environment):

* ``--kubeconfig PATH`` / ``TENON_KUBECONFIG``: the workload cluster, where NodeClasses and the Secrets they
  name live (used to read OpenStack credentials; optional).
* ``--management-kubeconfig PATH`` / ``TENON_MANAGEMENT_KUBECONFIG``: the Cluster API management cluster
  (MachineDeployments, Machines). Defaults to the workload kubeconfig, then to the in-cluster service account.
* ``--namespace NS`` / ``TENON_CAPI_NAMESPACE``: watch MachineDeployments and Machines in one namespace only.
* ``--leak-grace SECONDS`` / ``TENON_LEAK_GRACE_SECONDS``: how long a Machine bound to a claim the log does not
  have may live (default 600).

The broker comes from ``TENON_NATS_URL`` and friends (``tenon.runtime.eventlog.connection``); the process runs as
the leader of the ``launcher-capi`` group (``tenon.runtime.service``), so a second replica waits.
"""

from __future__ import annotations

import argparse
import os
import sys

from tenon.runtime.kube import Kube, load_kube
from tenon.runtime.service import ServiceContext, run_service
from tenon.services.launcher_capi.service import CapiLauncher, LauncherSettings

SERVICE = "launcher-capi"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(
        prog="python -m tenon.services.launcher_capi", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--kubeconfig", default=env.get("TENON_KUBECONFIG"), help="workload cluster kubeconfig"
    )
    parser.add_argument(
        "--management-kubeconfig",
        default=env.get("TENON_MANAGEMENT_KUBECONFIG"),
        help="Cluster API management cluster kubeconfig (default: the workload one)",
    )
    parser.add_argument(
        "--namespace",
        default=env.get("TENON_CAPI_NAMESPACE"),
        help="only this namespace's MachineDeployments and Machines (default: all)",
    )
    parser.add_argument(
        "--leak-grace",
        type=float,
        default=float(env.get("TENON_LEAK_GRACE_SECONDS", "600")),
        help="seconds before a Machine bound to an unknown claim is removed (default 600)",
    )
    args = parser.parse_args(argv)
    if args.leak_grace < 0:
        parser.error(f"--leak-grace: must be >= 0 seconds, got {args.leak_grace}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = LauncherSettings(namespace=args.namespace, leak_grace=args.leak_grace)

    async def work(ctx: ServiceContext) -> None:
        management = await load_kube(args.management_kubeconfig or args.kubeconfig)
        workload: Kube | None = None
        try:
            if args.kubeconfig and args.management_kubeconfig:
                workload = await load_kube(args.kubeconfig)
            launcher = CapiLauncher(ctx.event_log, management, workload=workload, settings=settings)
            await launcher.run(ctx.stopping)
        finally:
            await management.close()
            if workload is not None:
                await workload.close()

    return run_service(SERVICE, work)


if __name__ == "__main__":
    sys.exit(main())
