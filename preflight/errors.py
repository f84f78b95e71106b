"""The pre-flight's report: every problem it found, at once."""

from __future__ import annotations

from backends.errors import ConfigError


class PreflightError(ConfigError):
    """Every problem the pre-flight found, one line each (`problems`)."""

    def __init__(self, problems: list[ConfigError]) -> None:
        self.problems = problems
        ValueError.__init__(self, "\n".join(str(p) for p in problems))
        self.field = ", ".join(p.field for p in problems)
