"""``python -m services.disruption [--kubeconfig PATH]``: run the disruption service (env: TENON_KUBECONFIG,
TENON_DISRUPTION_TICK_SECONDS, TENON_NATS_*)."""

from __future__ import annotations

import sys

from services.disruption.service import work
from shared.service import workload_service_main


def main(argv: list[str] | None = None) -> int:
    return workload_service_main("disruption", work, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
