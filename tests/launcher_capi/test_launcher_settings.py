"""The launcher's settings: from flags and the environment, checked once, one line naming what is wrong."""

from __future__ import annotations

import pytest

from tenon.runtime.service import main
from tenon.runtime.settings import SettingsError, load
from tenon.services.launcher_capi.service import SERVICE, LauncherCapiSettings


def settings(env: dict[str, str], *argv: str) -> LauncherCapiSettings:
    return load(LauncherCapiSettings, list(argv), env, prog="tenon run launcher-capi")


def test_defaults_and_durations_in_either_spelling() -> None:
    defaults = settings({})
    assert (defaults.leak_grace, defaults.launch_timeout, defaults.flavor_refresh) == (600.0, 300.0, 600.0)
    assert defaults.resync == defaults.events_max_age / 4  # well inside the retention unless set
    chosen = settings(
        {"TENON_LAUNCHER_LEAK_GRACE": "1h30m", "TENON_EVENTS_MAX_AGE": "2d", "TENON_CAPI_NAMESPACE": "capi"},
        "--launcher-resync",
        "6h",
    )
    assert (chosen.leak_grace, chosen.resync, chosen.namespace) == (5400.0, 21600.0, "capi")


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TENON_LAUNCHER_LEAK_GRACE": "soon"}, "TENON_LAUNCHER_LEAK_GRACE: 'soon' is not a duration"),
        ({"TENON_LAUNCHER_TICK": "0s"}, "TENON_LAUNCHER_TICK: '0s' is below the minimum"),
        (
            {"TENON_LAUNCHER_RESYNC": "14d"},
            "TENON_LAUNCHER_RESYNC: 14d is not shorter than TENON_EVENTS_MAX_AGE 14d",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(env: dict[str, str], says: str) -> None:
    with pytest.raises(SettingsError) as raised:
        settings(env)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_the_process_refuses_a_bad_value_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TENON_LAUNCHER_LEAK_GRACE", "-5m")
    assert main(SERVICE, []) == 2
    assert capsys.readouterr().err.strip().startswith("tenon run launcher-capi: TENON_LAUNCHER_LEAK_GRACE:")


def test_without_a_management_cluster_it_says_so_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("TENON_KUBECONFIG", "TENON_MANAGEMENT_KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    assert main(SERVICE, []) == 2
    assert "TENON_MANAGEMENT_KUBECONFIG: not set and not running in a cluster" in capsys.readouterr().err
