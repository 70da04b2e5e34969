"""``python -m tenon.services.disruption [--kubeconfig PATH]``: run the disruption service (env: TENON_KUBECONFIG,
TENON_DISRUPTION_TICK_SECONDS, TENON_NATS_*)."""

from __future__ import annotations

import sys

from tenon.runtime.service import workload_service_main
from tenon.services.disruption.service import work


def main(argv: list[str] | None = None) -> int:
    return workload_service_main("disruption", work, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
