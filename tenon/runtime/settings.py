"""Settings: every knob of every service, from a flag or the environment, validated once when it starts.

A service's settings are one frozen dataclass whose fields are declared with :func:`setting`: the environment
variable, the help text, the kind of value, the default and the bounds. :func:`load` builds the command line
from the same declaration (``TENON_EVENTS_MAX_AGE`` is ``--events-max-age``), takes a flag over the
environment over the default, and checks every value. A bad value is one line naming the variable and what
was wrong (:class:`SettingsError`; the service prints it and exits 2), never a traceback.
:func:`markdown_table` renders the README's settings table from the declarations, so the table cannot drift
from the code.

Durations accept Go's and Kubernetes' spelling (``90s``, ``1h30m``, ``720h``) plus days (``14d``), or a plain
number of seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")

Kind = Literal["duration", "int", "float", "str", "path"]

MAX_DURATION = 10 * 365 * 24 * 3600.0
"""Ten years: longer than any retention or timeout makes sense, and far from float trouble."""

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d)")


class SettingsError(ValueError):
    """A setting with a value the service cannot run with; ``str()`` is one line naming it."""


def parse_duration(text: str) -> float:
    """Seconds in ``text`` (``20s``, ``1h30m``, ``14d``, ``600``); ValueError with the reason otherwise."""
    value = text.strip()
    if not value.isascii():
        raise ValueError("is not a duration (use ASCII digits and units, e.g. 20s, 1h30m, 14d)")
    if re.fullmatch(r"\d+(\.\d+)?", value):
        seconds = float(value)
    else:
        parts = _DURATION_PART.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise ValueError("is not a duration (e.g. 20s, 1h30m, 14d, or a number of seconds)")
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if not math.isfinite(seconds) or seconds > MAX_DURATION:
        raise ValueError(f"is longer than {int(MAX_DURATION // 86400)} days")
    return seconds


def format_duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Setting:
    env: str
    help: str
    kind: Kind
    minimum: float | None = None
    maximum: float | None = None

    @property
    def flag(self) -> str:
        return "--" + self.env.removeprefix("TENON_").lower().replace("_", "-")

    def convert(self, raw: str) -> Any:
        """The value ``raw`` stands for; SettingsError naming the variable when it does not."""
        try:
            value = self._parse(raw)
        except ValueError as exc:
            raise SettingsError(f"{self.env}: {raw!r} {exc}") from None
        if isinstance(value, int | float):
            if self.minimum is not None and value < self.minimum:
                raise SettingsError(f"{self.env}: {raw!r} is below the minimum {self.describe(self.minimum)}")
            if self.maximum is not None and value > self.maximum:
                raise SettingsError(f"{self.env}: {raw!r} is above the maximum {self.describe(self.maximum)}")
        return value

    def _parse(self, raw: str) -> Any:
        text = raw.strip()
        if self.kind == "duration":
            return parse_duration(text)
        if self.kind == "int":
            if not re.fullmatch(r"-?\d{1,18}", text):
                raise ValueError("is not a whole number")
            return int(text)
        if self.kind == "float":
            if not re.fullmatch(r"-?\d{1,15}(\.\d{1,15})?", text):
                raise ValueError("is not a number")
            return float(text)
        if not text:
            raise ValueError("is empty")
        if self.kind == "path" and not os.path.exists(os.path.expanduser(text)):
            raise ValueError("names no file")
        return text

    def describe(self, value: Any) -> str:
        if value is None:
            return "(none)"
        return format_duration(value) if self.kind == "duration" else str(value)


def setting(
    env: str,
    default: Any,
    help: str,
    *,
    kind: Kind = "str",
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    """A dataclass field that is a setting (use as ``field: float = setting(...)``)."""
    declared = Setting(env, help, kind, minimum, maximum)
    return dataclasses.field(default=default, metadata={"setting": declared})


def declared(cls: type) -> list[tuple[dataclasses.Field[Any], Setting]]:
    return [(f, f.metadata["setting"]) for f in dataclasses.fields(cls) if "setting" in f.metadata]


def load(
    cls: type[T],
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    prog: str,
    description: str = "",
) -> T:
    """``cls`` from flags (``argv``), then the environment, then the defaults; SettingsError on a bad value.
    ``--help`` prints every setting with its variable and default, and exits."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for field, declared_setting in declared(cls):
        default = declared_setting.describe(field.default)
        parser.add_argument(
            declared_setting.flag,
            dest=field.name,
            default=None,
            metavar="VALUE",
            help=f"{declared_setting.help} [env {declared_setting.env}; default {default}]",
        )
    args = parser.parse_args(argv)
    values: dict[str, Any] = {}
    for field, declared_setting in declared(cls):
        raw = getattr(args, field.name)
        if raw is None:
            raw = env.get(declared_setting.env)
        if raw is not None:
            values[field.name] = declared_setting.convert(raw)
    try:
        return cls(**values)
    except (ValueError, TypeError) as exc:  # a check across settings in __post_init__
        raise SettingsError(str(exc)) from None


def markdown_table(classes: Iterable[tuple[str, type]]) -> str:
    """The README's table: one row per variable, with the services that read it."""
    classes = list(classes)
    rows: dict[str, tuple[Setting, Any, list[str]]] = {}
    for service, cls in classes:
        for field, declared_setting in declared(cls):
            entry = rows.setdefault(declared_setting.env, (declared_setting, field.default, []))
            entry[2].append(service)
    lines = ["| variable | flag | default | what it sets | read by |", "|---|---|---|---|---|"]
    for env_name in sorted(rows):
        declared_setting, default, services = rows[env_name]
        readers = "all" if len(services) == len({s for s, _ in classes}) else ", ".join(services)
        shown = declared_setting.describe(default).replace("|", "\\|")
        lines.append(
            f"| `{env_name}` | `{declared_setting.flag}` | {shown} | {declared_setting.help} | {readers} |"
        )
    return "\n".join(lines)


def positive(name: str, value: float) -> None:
    """For ``__post_init__`` checks that involve one value."""
    if not (math.isfinite(value) and value > 0):
        raise SettingsError(f"{name}: must be positive, got {value!r}")
