"""``python -m services.scheduler [--kubeconfig PATH]``: run the scheduler (env: TENON_KUBECONFIG, TENON_NATS_*)."""

from __future__ import annotations

import argparse
import os
import sys

from services.scheduler.service import work
from shared.service import ServiceContext, run_service


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.scheduler", description=__doc__)
    parser.add_argument("--kubeconfig", default=os.environ.get("TENON_KUBECONFIG"),
                        help="kubeconfig of the workload cluster (default: TENON_KUBECONFIG, else in-cluster)")
    args = parser.parse_args(argv)

    async def scheduler(ctx: ServiceContext) -> None:
        await work(ctx, args.kubeconfig)

    return run_service("scheduler", scheduler)


if __name__ == "__main__":
    sys.exit(main())
