"""``python -m tenon.services.pod_watcher`` as its own process, configured by the environment, stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from devtools.broker import LocalNatsServer
from devtools.sandbox.testing import running_sandbox
from proto.events import NodeObserved, PendingBatch
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.services.pod_watcher.__main__ import settings_from
from tests.pod_watcher.support import wait_for_events
from tests.sandbox.controller_support import node, pod


def test_flags_override_the_environment_and_bad_values_name_the_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "workload.kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    env = {
        "TENON_KUBECONFIG": str(kubeconfig),
        "TENON_BATCH_IDLE_SECONDS": "2",
        "TENON_REBATCH_SECONDS": "60",
    }
    settings = settings_from(["--batch-max-seconds", "20", "--batch-idle-seconds", "3"], env)
    assert (
        settings.kubeconfig,
        settings.batch_idle_seconds,
        settings.batch_max_seconds,
        settings.rebatch_seconds,
    ) == (str(kubeconfig), 3.0, 20.0, 60.0)
    for argv, bad_env, named in [
        (["--batch-idle-seconds", "soon"], env, "--batch-idle-seconds"),
        (["--batch-idle-seconds", "20"], env, "batch_max_seconds (10.0) must not be shorter"),
        (
            [],
            {"TENON_KUBECONFIG": str(tmp_path / "missing")},
            "--kubeconfig (or TENON_KUBECONFIG): no such file",
        ),
        ([], {}, "not running in a cluster"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            settings_from(argv, bad_env)
        assert exit_info.value.code == 2
        assert named in capsys.readouterr().err


@pytest.mark.integration
async def test_the_service_process_publishes_and_stops_cleanly_on_sigterm(
    nats_server: LocalNatsServer, jetstream_log: JetStreamEventLog
) -> None:
    async with running_sandbox(controllers=False) as sandbox:
        store = sandbox.workload_store
        store.create(store.resource("v1", "Node"), node("n1", ready=True))
        env = {
            **os.environ,
            "TENON_NATS_URL": nats_server.url,
            "TENON_KUBECONFIG": str(sandbox.workload_kubeconfig),
            "TENON_BATCH_IDLE_SECONDS": "0.2",
            "TENON_LOG_LEVEL": "WARNING",
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tenon.services.pod_watcher", env=env, stderr=asyncio.subprocess.PIPE
        )
        try:
            await wait_for_events(
                jetstream_log,
                NodeObserved,
                lambda e: len(e) == 1,
                timeout=20,
                what="the process publishing the node",
            )
            created = store.create(store.resource("v1", "Pod"), pod("stuck"))
            created["status"] = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/1 nodes",
                    }
                ],
            }
            store.update(
                store.resource("v1", "Pod"), created, "status"
            )  # what the kube-scheduler would write
            batches = await wait_for_events(
                jetstream_log, PendingBatch, lambda b: len(b) == 1, what="a batch"
            )
            assert [p["metadata"]["name"] for p in batches[0].pods] == ["stuck"]
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), 15)
        assert process.returncode == 0, stderr.decode()[-2000:]
