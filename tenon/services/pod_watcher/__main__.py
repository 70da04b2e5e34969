"""``python -m tenon.services.pod_watcher``: flags, or the environment, to :class:`PodWatcherSettings`, then serve.

Every flag has an environment variable (the flag wins): ``--kubeconfig`` / ``TENON_KUBECONFIG``,
``--batch-idle-seconds`` / ``TENON_BATCH_IDLE_SECONDS``, ``--batch-max-seconds`` / ``TENON_BATCH_MAX_SECONDS``,
``--rebatch-seconds`` / ``TENON_REBATCH_SECONDS``. Bad values exit with code 2 and a message naming the flag.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tenon.runtime.service import run_service
from tenon.services.pod_watcher.service import SERVICE_NAME, PodWatcherSettings, make_work

_DEFAULTS = PodWatcherSettings()


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="python -m tenon.services.pod_watcher",
        description="Watch the workload cluster; publish pending-pod batches and cluster observations.",
    )
    parser.add_argument(
        "--kubeconfig",
        default=env.get("TENON_KUBECONFIG"),
        help="workload cluster kubeconfig (env TENON_KUBECONFIG; default: in-cluster)",
    )
    parser.add_argument(
        "--batch-idle-seconds",
        type=_seconds,
        default=env.get("TENON_BATCH_IDLE_SECONDS", str(_DEFAULTS.batch_idle_seconds)),
        help="close a window this long after the last new pod (env TENON_BATCH_IDLE_SECONDS)",
    )
    parser.add_argument(
        "--batch-max-seconds",
        type=_seconds,
        default=env.get("TENON_BATCH_MAX_SECONDS", str(_DEFAULTS.batch_max_seconds)),
        help="close a window this long after the first pod (env TENON_BATCH_MAX_SECONDS)",
    )
    parser.add_argument(
        "--rebatch-seconds",
        type=_seconds,
        default=env.get("TENON_REBATCH_SECONDS", str(_DEFAULTS.rebatch_seconds)),
        help="offer a still-pending pod again this long after its batch (env TENON_REBATCH_SECONDS)",
    )
    return parser


def settings_from(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> PodWatcherSettings:
    parser = build_parser(env)
    args = parser.parse_args(argv)
    if args.kubeconfig and not Path(args.kubeconfig).expanduser().is_file():
        parser.error(f"--kubeconfig (or TENON_KUBECONFIG): no such file: {args.kubeconfig}")
    if not args.kubeconfig and not (env if env is not None else os.environ).get("KUBERNETES_SERVICE_HOST"):
        parser.error(
            "no --kubeconfig (or TENON_KUBECONFIG) and not running in a cluster: "
            "say which workload cluster to watch"
        )
    try:
        return PodWatcherSettings(
            kubeconfig=args.kubeconfig or None,
            batch_idle_seconds=args.batch_idle_seconds,
            batch_max_seconds=args.batch_max_seconds,
            rebatch_seconds=args.rebatch_seconds,
        )
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits


def main(argv: Sequence[str] | None = None) -> int:
    settings = settings_from(argv)
    return run_service(SERVICE_NAME, make_work(settings))


if __name__ == "__main__":
    sys.exit(main())
