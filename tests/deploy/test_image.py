"""The image as the Dockerfile builds it (no Docker engine here, so read as Docker reads it): two stages on
python:3.11-slim, a constraints-pinned install into a virtualenv, nothing but that virtualenv in the final
stage, a non-root user, ``tenon`` as the entrypoint; and the build context holds only what the install needs,
which is enough to run every service without the development tools."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.deploy.dockerfile import DockerIgnore, Stage, parse_dockerfile

ROOT = Path(__file__).resolve().parents[2]
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|make|build-essential|python3?-dev|libc6?-dev|apt-get install|cargo)\b"
)


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile((ROOT / "Dockerfile").read_text())


@pytest.fixture(scope="module")
def dockerignore() -> DockerIgnore:
    return DockerIgnore.parse((ROOT / ".dockerignore").read_text())


def test_two_stages_on_python_311_slim(stages: list[Stage]) -> None:
    assert [(s.base, s.name) for s in stages] == [("python:3.11-slim", "builder"), ("python:3.11-slim", None)]


def test_builder_installs_with_the_constraints_into_a_virtualenv(stages: list[Stage]) -> None:
    builder = stages[0]
    runs = " ; ".join(i.arguments for i in builder.all("RUN"))
    assert "python -m venv /opt/tenon" in runs
    assert "/opt/tenon/bin/pip install -c constraints.txt ." in runs
    copied = [source for i in builder.all("COPY") for source in i.arguments.split()[:-1]]
    assert {"pyproject.toml", "constraints.txt", "proto", "tenon"} <= set(copied)
    assert "devtools" not in copied


def test_final_stage_holds_only_the_virtualenv_and_no_build_tools(stages: list[Stage]) -> None:
    final = stages[-1]
    copies = final.all("COPY") + final.all("ADD")
    assert [c.arguments for c in copies] == ["--from=builder /opt/tenon /opt/tenon"]
    for run in final.all("RUN"):
        assert not BUILD_TOOLS.search(run.arguments), run.arguments
    assert "pip uninstall -y pip setuptools wheel" in " ".join(r.arguments for r in final.all("RUN"))


def test_final_stage_runs_as_a_non_root_user_with_tenon_as_entrypoint(stages: list[Stage]) -> None:
    final = stages[-1]
    [user] = final.all("USER")
    uid = user.arguments.split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so runAsNonRoot can verify it without /etc/passwd
    assert final.instructions.index(user) > max(final.instructions.index(r) for r in final.all("RUN"))
    [entrypoint] = final.all("ENTRYPOINT")
    assert entrypoint.exec_form() == ["tenon"]
    assert any("PATH=/opt/tenon/bin:$PATH" in e.arguments for e in final.all("ENV"))
    assert [e.arguments for e in final.all("EXPOSE")] == ["8081"]  # TENON_HEALTH_PORT's default


def test_context_holds_the_package_and_its_pins_and_nothing_else(
    stages: list[Stage], dockerignore: DockerIgnore
) -> None:
    files = dockerignore.context_files(ROOT)
    tops = {f.split("/")[0] for f in files}
    assert tops == {"pyproject.toml", "constraints.txt", "README.md", "proto", "tenon"}
    assert not [f for f in files if "__pycache__" in f or f.endswith(".kubeconfig")]
    for copy in stages[0].all("COPY"):
        for source in copy.arguments.split()[:-1]:
            assert any(f == source or f.startswith(source + "/") for f in files), (
                f"COPY {source}: not in context"
            )
    for path in (
        "devtools/stack.py",
        "tests/conftest.py",
        ".venv/bin/python",
        "deploy/base/kustomization.yaml",
    ):
        assert dockerignore.excluded(path), path


def test_the_context_alone_runs_every_service_entry_point_without_devtools(
    dockerignore: DockerIgnore, tmp_path: Path
) -> None:
    """What the image installs (the context's packages beside the pinned dependencies), with no devtools on
    the path: the CLI lists its own commands only, and every service ``tenon run`` knows imports."""
    for relative in dockerignore.context_files(ROOT):
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{sysconfig.get_paths()['purelib']}"}
    script = (
        "import importlib, sys\n"
        "from tenon.services import SERVICES\n"
        "from tenon.cli.main import build_parser\n"
        "for module in SERVICES.values():\n"
        "    importlib.import_module(module)\n"
        "importlib.import_module('tenon.runtime.observability')\n"
        "assert not [n for n in sys.modules if n.split('.')[0] == 'devtools'], 'devtools imported'\n"
        "print(build_parser().format_help())\n"
    )
    # -S: no site-packages processing, so the development install's path hooks (which add devtools) stay off
    result = subprocess.run(
        [sys.executable, "-S", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    commands = set(re.findall(r"^    (\w[\w-]*)", result.stdout, re.MULTILINE))
    assert {"run", "tap", "replay", "explain", "simulate"} <= commands
    assert not commands & {"up", "sandbox", "broker"}
