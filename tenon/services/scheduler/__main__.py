"""``python -m tenon.services.scheduler [--kubeconfig PATH]``: run the scheduler (env: TENON_KUBECONFIG, TENON_NATS_*,
TENON_LAUNCH_TIMEOUT_SECONDS, TENON_REGISTRATION_TIMEOUT_SECONDS, TENON_TICK_SECONDS)."""

from __future__ import annotations

import sys

from tenon.runtime.service import workload_service_main
from tenon.services.scheduler.service import work


def main(argv: list[str] | None = None) -> int:
    return workload_service_main("scheduler", work, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main())
