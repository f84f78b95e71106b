"""The suite's evidence that each setting is honoured: the fields its real runs read (schemas/read_trace.py).

    python -m tests.settings_reads FOLDER     # after a whole traced run of the suite (scripts/test.sh --ci, --full)

Fails, listing each, for a field of ExperimentConfig that no runtime code read in any run and that
schemas/support.py does not refuse, warn, or give a meaning in validation alone (resolved into other fields,
validated). An `*_args` field counts when read as a whole (its keys are a dict's, which the trace does not see: each function's
arguments are checked in the code, tests/test_settings_wired.py). A field of a tagged-union variant counts only when
it was read on that variant (a trainer's
save_interval read on the torch trainer's settings says nothing about veRL's). A section class that appears in
several places (a task set: the training one and each evaluation's) is one class, so a read anywhere counts for all.
"""

from __future__ import annotations

import json
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from schemas import ExperimentConfig, schema_walk, support
from schemas.base import SECTIONS


def _models(annotation: typing.Any) -> list[type[BaseModel]]:
    """The settings classes inside an annotation (a section, a union of variants, a list or dict of them)."""
    annotation = schema_walk._unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def leaves(model: type[BaseModel], prefix: str, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, type, str]]:
    """(schema key, class, field) of every field that holds a value, not a section, below `model`."""
    tag = getattr(model, "TAG", None)
    for name, info in model.model_fields.items():
        if name in skip or name == tag:
            continue
        inner = _models(info.annotation)
        origin = typing.get_origin(schema_walk._unwrap(info.annotation))
        many = origin in (list, dict) or (inner and any(typing.get_origin(a) in (list, dict)
                                                         for a in typing.get_args(schema_walk._unwrap(info.annotation))))
        if not inner:
            yield f"{prefix}{name}", model, name
            continue
        for sub in inner:
            variant = f"[{schema_walk._variant_tag(sub)}]" if len(inner) > 1 else ""
            yield from leaves(sub, f"{prefix}{name}{'[]' if many else ''}{variant}.")


def needs_a_reader(key: str) -> bool:
    """Whether the field's meaning is the runtime reading it: not when the ledger refuses or warns it whatever its
    value, turns it into other fields, or gives it its meaning in validation."""
    found = support.entry_for(key)
    if found is None:
        return True  # test_settings_wired names it as missing an entry
    entry = found[1]
    return not (entry.covers or entry.unconditional or entry.resolved_into or entry.validated_in)


def read(folder: Path) -> set[tuple[str, str]]:
    """(module.Class, field) pairs that runtime code read, from every process's file."""
    pairs = set()
    for path in folder.glob("reads-*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                pairs.add((row["model"], row["field"]))
    return pairs


def unread(folder: Path) -> list[str]:
    done = read(folder)
    stage = _models(ExperimentConfig.model_fields["stages"].annotation)[0]
    places = [*leaves(ExperimentConfig, "", frozenset({"stages"})),
              *leaves(stage, "stages[].", frozenset(SECTIONS))]
    return sorted(key for key, model, field in places
                  if (f"{model.__module__}.{model.__qualname__}", field) not in done and needs_a_reader(key))


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    if not any(folder.glob("reads-*.jsonl")):
        print(f"settings reads: no reads recorded in {folder}: was RFT_TRACE_SETTINGS set for the run?")
        return 1
    missing = unread(folder)
    if missing:
        print(f"settings reads: {len(missing)} setting(s) accepted by the schema were read by no runtime code in any "
              "run of the suite (tests/settings_reads.py). Read each where it takes effect, or refuse or warn it in "
              "schemas/support.py, or cover it with a test that runs it:")
        print("\n".join(f"  - {key}" for key in missing))
        return 1
    print(f"settings reads: every setting that needs a reader was read ({len(read(folder))} field reads recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
