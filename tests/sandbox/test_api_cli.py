"""``tenon sandbox`` as a process: writes both kubeconfigs, serves, and stops cleanly on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from tenon.cli.main import main as tenon_main

REPO = Path(__file__).resolve().parents[2]


async def _serve_and_stop(tmp_path: Path, signum: int) -> None:
    workload, management = tmp_path / f"w{signum}.kubeconfig", tmp_path / f"m{signum}.kubeconfig"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "devtools.sandbox",
        "--port",
        "0",
        "--management-port",
        "0",
        "--kubeconfig",
        str(workload),
        "--management-kubeconfig",
        str(management),
        "--no-controllers",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(20):
            # the child writes the files; there is no event to wait on but the file system
            while not (workload.exists() and management.exists()):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        urls = [
            yaml.safe_load(path.read_text())["clusters"][0]["cluster"]["server"]
            for path in (workload, management)
        ]
        assert urls[0] != urls[1] and all(u.startswith("http://127.0.0.1:") for u in urls)
        async with aiohttp.ClientSession() as session:
            for url in urls:
                async with session.get(url + "/api/v1/namespaces/default") as response:
                    assert response.status == 200 and (await response.json())["kind"] == "Namespace"
            # an open watch must not hold the shutdown up
            async with session.get(urls[0] + "/api/v1/pods", params={"watch": "true"}) as watching:
                assert watching.status == 200
                process.send_signal(signum)
                async with asyncio.timeout(10):
                    await watching.content.read()
        async with asyncio.timeout(10):
            out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        assert b"workload cluster http://127.0.0.1:" in out
        assert b"Traceback" not in err
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_stops_cleanly_on_sigint_and_sigterm(tmp_path: Path) -> None:
    await asyncio.gather(_serve_and_stop(tmp_path, signal.SIGINT), _serve_and_stop(tmp_path, signal.SIGTERM))


def test_bad_options_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, complaint in (
        (["sandbox", "--time-scale", "-1"], "--time-scale: must be a positive"),
        (["sandbox", "--profile", "slow"], "invalid choice: 'slow'"),
        (["sandbox", "--port", "70000"], "port: 70000 is outside"),
    ):
        with pytest.raises(SystemExit) as exited:
            tenon_main(argv)
        assert exited.value.code == 2
        assert complaint in capsys.readouterr().err
