"""Which settings the runtime reads: with RFT_TRACE_SETTINGS set to a folder, every read of a settings field by code
outside schemas/ (or through a settings method such code called), not by validation, tests/ or deployments/, is
written there once per process, as a JSON line
{"model": module.Class, "field": name, "by": repository path of the reading module}, with "value" for a field whose
values are named (a Literal: which of them the runs read). A function's arguments are a dict: each key read through
algorithms/registry.py's FunctionArgs is a row {"model": "algorithm.*_args", "field": "policy_loss_fn[ppo].clip_range"}.

The test command turns it on for a whole run of the suite (scripts/test.sh), whose real runs (every mode, trainer and
engine) are then the evidence that each field is honoured: tests/settings_reads.py fails for a field nobody read.
Off, nothing is installed and reads cost what pydantic's do. Ray actors and subprocesses inherit the variable, so
their reads count too."""

from __future__ import annotations

import json
import os
import sys
import threading
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, Literal

from algorithms.registry import FunctionArgs

TRACE_ENV = "RFT_TRACE_SETTINGS"
# The "model" of a read of a function's argument (algorithms/registry.py FunctionArgs): its field is
# `<kind>[<function>].<argument>`, as below `algorithm` in the schema's keys.
ARGUMENTS = "algorithm.*_args"
ROOT = Path(__file__).resolve().parents[1]
_NOT_RUNTIME = ("schemas/", "tests/", "deployments/")
_seen: set[tuple[str, str, str, str | None]] = set()
_validating = threading.local()  # depth > 0 while this thread's rules run: their reads through algorithms/ are validation


@contextmanager
def validating() -> Iterator[None]:
    """Reads inside are the schema's own (schemas/rules.py asking algorithms/ what a loss needs), not the runtime's."""
    _validating.depth = getattr(_validating, "depth", 0) + 1
    try:
        yield
    finally:
        _validating.depth -= 1


@cache  # a module's file name, once: resolving a path on every read would cost a system call each
def _module(filename: str) -> str | None:
    """The repository path of one of our modules, or None for a library (.venv/) or the standard library."""
    try:
        path = Path(filename).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    return None if path.startswith(".") or not path.endswith(".py") else path


def _reader(frame: Any) -> str | None:
    """The runtime module a read is for: the first caller outside schemas/, when the read came through a settings
    method the runtime called (`aux.auxiliary_name()`, `config.experiment_dir`); None when that caller is validation
    (pydantic calling the schema's validators), a test, a deployment generator or a library."""
    while frame is not None:
        path = _module(frame.f_code.co_filename)
        if path is None:
            return None
        if not path.startswith("schemas/"):
            return None if path.startswith(_NOT_RUNTIME) else path
        frame = frame.f_back
    return None


@cache
def _named_values(model: type, field: str) -> bool:
    """Whether the field's type is (or holds) a Literal, whose value is worth recording."""
    def literal(annotation: Any) -> bool:
        return typing.get_origin(annotation) is Literal or any(literal(a) for a in typing.get_args(annotation))
    return literal(model.__pydantic_fields__[field].annotation)


def _record(model: str, field: str, by: str, named: str | None = None) -> None:
    key = (model, field, by, named)
    if key in _seen:
        return
    _seen.add(key)
    folder = Path(os.environ[TRACE_ENV])
    folder.mkdir(parents=True, exist_ok=True)
    row = {"model": model, "field": field, "by": by} | ({"value": named} if named is not None else {})
    line = json.dumps(row) + "\n"
    with open(folder / f"reads-{os.getpid()}.jsonl", "a", encoding="utf-8") as out:  # one short write: whole lines
        out.write(line)


def install(base: type) -> None:
    """Trace field reads on `base` (schemas.base.Section) and its subclasses when RFT_TRACE_SETTINGS is set."""
    if not os.environ.get(TRACE_ENV):
        return
    plain = base.__getattribute__

    def traced(self: Any, name: str) -> Any:
        value = plain(self, name)
        cls = type(self)
        if name in cls.__pydantic_fields__ and not getattr(_validating, "depth", 0):
            by = _reader(sys._getframe(1))
            if by is not None:
                named = value if isinstance(value, str) and _named_values(cls, name) else None
                _record(f"{cls.__module__}.{cls.__qualname__}", name, by, named)
        return value

    def argument_read(place: str) -> None:
        if not getattr(_validating, "depth", 0):
            by = _reader(sys._getframe(2))  # the code that read the key: this hook <- FunctionArgs' method <- it
            if by is not None:
                _record(ARGUMENTS, place, by)

    base.__getattribute__ = traced  # type: ignore[method-assign]
    FunctionArgs.on_read = argument_read
