"""Stopping child processes the same way everywhere: politely, then for sure."""

from __future__ import annotations

import signal
import subprocess


def stop_process(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL. A process already gone is left alone."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_process(process)


def kill_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL, as a crash would."""
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()
