"""compose.yaml is a valid Compose file (against the Compose Specification's own JSON Schema, vendored beside
this test) that builds tenon's image and runs NATS with JetStream and every service, installing nothing at
start."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tenon.services import SERVICES

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((Path(__file__).parent / "compose-spec.json").read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return document


def errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(SCHEMA)
    return sorted(
        f"{'.'.join(str(p) for p in e.absolute_path) or '.'}: {e.message}"
        for e in validator.iter_errors(document)
    )


def test_compose_file_is_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    assert errors(compose) == []


def test_the_schema_refuses_what_compose_refuses(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["scheduler"]["depends_on"] = {"nats": {"condition": "service_ready"}}
    broken["services"]["disruption"]["buidl"] = "."
    assert errors(broken) == [
        "services.disruption: 'buidl' does not match any of the regexes: '^x-'",
        "services.scheduler.depends_on: {'nats': {'condition': 'service_ready'}} is not valid under any "
        "of the given schemas",
    ]


def test_every_service_runs_from_the_built_image(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(SERVICES) <= set(services)  # disruption included
    for name in SERVICES:
        service = services[name]
        assert service["command"] == ["run", name]
        assert service["build"] == {"context": ".", "dockerfile": "Dockerfile"}
        assert service["image"] == "tenon:local"
        assert (ROOT / service["build"]["dockerfile"]).is_file()
        # nothing installed at start, and the source tree is not mounted (pip on a read-only mount failed)
        assert not any(str(v).split(":")[0] in (".", "./") for v in service.get("volumes", []))
        assert "pip" not in json.dumps(service.get("command")) + json.dumps(service.get("entrypoint", ""))
        assert service["depends_on"] == {"nats": {"condition": "service_healthy"}}
        assert service["environment"]["TENON_NATS_URL"] == "nats://nats:4222"
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
        assert "/readyz" in " ".join(service["healthcheck"]["test"])
    assert (
        services["launcher-capi"]["environment"]["TENON_MANAGEMENT_KUBECONFIG"]
        == "/kube/management.kubeconfig"
    )


def test_nats_runs_jetstream_and_takes_tenons_largest_message(compose: dict[str, Any]) -> None:
    nats = compose["services"]["nats"]
    [config] = nats["configs"]
    content = compose["configs"][config["source"]]["content"]
    assert nats["command"] == ["--config", config["target"]]
    assert "jetstream {" in content and "store_dir: /data" in content
    assert "max_payload: 8MB" in content
    assert "js-enabled-only" in " ".join(nats["healthcheck"]["test"])
