"""Reading a Dockerfile and a .dockerignore the way Docker does, for tests that cannot run a Docker engine.

:func:`parse_dockerfile` splits a Dockerfile into stages of instructions (line continuations joined, comments
dropped, ``ARG`` defaults before the first ``FROM`` substituted into ``FROM``). :class:`DockerIgnore` applies
a ``.dockerignore`` to a directory as the builder does (moby's patternmatcher: Go ``filepath.Match`` patterns
plus ``**``, a pattern also matching a parent directory, later patterns winning, ``!`` re-including).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str

    def exec_form(self) -> list[str] | None:
        """The JSON array of ``ENTRYPOINT ["tenon"]``-style arguments, or None for the shell form."""
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return None
        return value if isinstance(value, list) else None


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def _logical_lines(text: str) -> list[str]:
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append((current + stripped).strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def parse_dockerfile(text: str) -> list[Stage]:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in _logical_lines(text):
        keyword, _, arguments = line.partition(" ")
        keyword, arguments = keyword.upper(), arguments.strip()
        if keyword == "ARG" and not stages:
            name, _, default = arguments.partition("=")
            args[name] = default
        elif keyword == "FROM":
            words = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], ""), arguments).split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        elif stages:
            stages[-1].instructions.append(Instruction(keyword, arguments))
        else:
            raise ValueError(f"Dockerfile: {keyword} before the first FROM")
    return stages


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


@dataclass(frozen=True)
class DockerIgnore:
    """The rules of one ``.dockerignore``, in order: (re-include?, regex, the pattern's literal prefix)."""

    rules: tuple[tuple[bool, re.Pattern[str], str], ...]

    @classmethod
    def parse(cls, text: str) -> DockerIgnore:
        rules = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            include = line.startswith("!")
            pattern = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
            literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
            rules.append((include, _pattern_regex(pattern), literal))
        return cls(tuple(rules))

    def excluded(self, path: str) -> bool:
        """Whether ``path`` (relative, with ``/``) is left out of the build context."""
        parts = path.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        result = False
        for include, regex, _ in self.rules:
            if any(regex.match(prefix) for prefix in prefixes):
                result = not include
        return result

    def _may_reinclude_below(self, directory: str) -> bool:
        return any(
            include and (literal.startswith(directory + "/") or directory.startswith(literal))
            for include, _, literal in self.rules
        )

    def context_files(self, root: Path) -> list[str]:
        """Every file of ``root`` the build context would hold (an excluded directory that no ``!`` rule
        reaches into is not walked, as Docker does not)."""
        kept = []
        for directory, dirnames, filenames in os.walk(root):
            here = Path(directory).relative_to(root).as_posix()
            here = "" if here == "." else here + "/"
            dirnames[:] = [
                d
                for d in dirnames
                if d != ".git" and (not self.excluded(here + d) or self._may_reinclude_below(here + d))
            ]
            kept += [here + f for f in filenames if not self.excluded(here + f)]
        return sorted(kept)
