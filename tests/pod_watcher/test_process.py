"""``python -m tenon.services.pod_watcher``: its settings, and the process configured by the environment,
stopped by SIGTERM."""

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
from tenon.runtime.service import main
from tenon.runtime.settings import SettingsError, load
from tenon.services.pod_watcher.service import SERVICE, PodWatcherSettings
from tests.pod_watcher.support import wait_for_events
from tests.sandbox.controller_support import node, pod


def test_flags_override_the_environment_and_bad_values_are_one_line_naming_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "workload.kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    env = {"TENON_KUBECONFIG": str(kubeconfig), "TENON_BATCH_IDLE": "2s", "TENON_REBATCH": "1m"}
    settings = load(PodWatcherSettings, ["--batch-max", "20s", "--batch-idle", "3"], env, prog="pod-watcher")
    assert (settings.kubeconfig, settings.batch_idle, settings.batch_max, settings.rebatch) == (
        str(kubeconfig),
        3.0,
        20.0,
        60.0,
    )
    defaults = load(PodWatcherSettings, [], {}, prog="pod-watcher")
    assert (defaults.batch_idle, defaults.batch_max, defaults.rebatch) == (1.0, 10.0, 5.0)
    for argv, bad_env, named in [
        (["--batch-idle", "soon"], env, "TENON_BATCH_IDLE: 'soon' is not a duration"),
        (
            ["--batch-idle", "20s"],
            env,
            "TENON_BATCH_MAX (10s) must not be shorter than TENON_BATCH_IDLE (20s)",
        ),
        ([], {"TENON_REBATCH": "0"}, "TENON_REBATCH: '0' is below the minimum"),
        ([], {"TENON_KUBECONFIG": str(tmp_path / "missing")}, "names no file"),
    ]:
        with pytest.raises(SettingsError) as refused:
            load(PodWatcherSettings, argv, bad_env, prog="pod-watcher")
        assert named in str(refused.value) and "\n" not in str(refused.value)
    monkeypatch.setenv("TENON_BATCH_MAX", "500ms")
    assert main(SERVICE, []) == 2  # what the process does with it: one line, exit 2
    assert capsys.readouterr().err == (
        "tenon run pod-watcher: TENON_BATCH_MAX (0.5s) must not be shorter than TENON_BATCH_IDLE (1s)\n"
    )


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
            "TENON_BATCH_IDLE": "200ms",
            "TENON_HEALTH_PORT": "0",
            "TENON_HEALTH_HOST": "127.0.0.1",
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
