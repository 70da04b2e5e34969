"""Settings: one declaration gives the flag, the variable, the check and the README's row."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from devtools import docs
from tenon.runtime.service import CommonSettings
from tenon.runtime.settings import SettingsError, load, parse_duration, setting


@dataclass(frozen=True)
class ExampleSettings(CommonSettings):
    grace: float = setting("TENON_EXAMPLE_GRACE", 600.0, "how long to wait", kind="duration", minimum=0)
    workers: int = setting("TENON_EXAMPLE_WORKERS", 4, "how many at once", kind="int", minimum=1, maximum=64)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("20s", 20),
        ("14d", 14 * 86400),
        ("1h30m", 5400),
        ("720h", 720 * 3600),
        ("600", 600),
        ("1.5", 1.5),
        ("250ms", 0.25),
    ],
)
def test_durations_read_as_kubernetes_and_go_spell_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["14x", "", "h", "1e9", "１s", "-5s", "10 s", "99999999d"])
def test_what_is_not_a_duration_says_so(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_a_flag_wins_over_the_environment_over_the_default() -> None:
    env = {"TENON_EXAMPLE_GRACE": "2m", "TENON_EVENTS_MAX_AGE": "20s"}
    settings = load(ExampleSettings, ["--example-grace", "90s"], env, prog="example")
    assert (settings.grace, settings.events_max_age, settings.workers) == (90, 20, 4)
    assert settings.resync_interval == 5  # a quarter of the retention


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TENON_EVENTS_MAX_AGE": "14x"}, "TENON_EVENTS_MAX_AGE: '14x' is not a duration"),
        ({"TENON_EXAMPLE_WORKERS": "lots"}, "TENON_EXAMPLE_WORKERS: 'lots' is not a whole number"),
        ({"TENON_EXAMPLE_WORKERS": "65"}, "TENON_EXAMPLE_WORKERS: '65' is above the maximum 64"),
        ({"TENON_LOG_LEVEL": "LOUD"}, "TENON_LOG_LEVEL: 'LOUD' is not DEBUG, INFO, WARNING or ERROR"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as error:
        load(ExampleSettings, [], env, prog="example")
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_a_service_refuses_a_bad_setting_with_exit_2_and_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tenon.cli.main", "run", "scheduler", "--events-max-age", "14x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "tenon run scheduler: TENON_EVENTS_MAX_AGE: '14x' is not a duration "
        "(e.g. 20s, 1h30m, 14d, or a number of seconds)"
    )


def test_the_generated_tables_are_the_code_s() -> None:
    assert docs.stale() == [], "run 'make docs': the settings or permission tables are stale"
