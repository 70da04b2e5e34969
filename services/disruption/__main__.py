"""``python -m services.disruption [--kubeconfig PATH]``: run the disruption service (env: TENON_KUBECONFIG,
TENON_DISRUPTION_TICK_SECONDS, TENON_NATS_*)."""

from __future__ import annotations

import argparse
import os
import sys

from services.disruption.service import work
from shared.service import ServiceContext, run_service


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.disruption", description=__doc__)
    parser.add_argument("--kubeconfig", default=os.environ.get("TENON_KUBECONFIG"),
                        help="kubeconfig of the workload cluster (default: TENON_KUBECONFIG, else in-cluster)")
    args = parser.parse_args(argv)

    async def disruption(ctx: ServiceContext) -> None:
        await work(ctx, args.kubeconfig)

    return run_service("disruption", disruption)


if __name__ == "__main__":
    sys.exit(main())
