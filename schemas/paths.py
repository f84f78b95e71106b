"""Names that become folders: `project`, `name` and `stages[].stage_name` are single path components, so
{checkpoint_root_dir}/{project}/{name} never leaves checkpoint_root_dir (no separator, no `..`, no
absolute path). checkpointing/layout.py checks the resolved folder again at run time (symlinks)."""

from __future__ import annotations

import re

# Control characters, both separators and NUL: never in a folder name we create.
_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")


def component_problem(value: str) -> str | None:
    """Why `value` cannot be one folder name inside the experiment tree, or None when it can."""
    if value in (".", ".."):
        return f"{value!r} names a folder above or at its parent: give a plain folder name"
    if _FORBIDDEN.search(value):
        return (f"{value!r} is not a single folder name (no '/', '\\\\', control characters or absolute "
                "paths): it becomes a folder inside checkpoint_root_dir")
    if value != value.strip():
        return f"{value!r} starts or ends with white space: give a plain folder name"
    return None


def check_component(value: str) -> str:
    """A pydantic field validator body: `value` when it is one safe folder name, else ValueError."""
    problem = component_problem(value)
    if problem:
        raise ValueError(problem)
    return value
