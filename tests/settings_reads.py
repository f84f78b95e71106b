"""The suite's evidence that each setting is honoured: the fields its real runs read (schemas/read_trace.py).

    python -m tests.settings_reads FOLDER     # after a whole traced run of the suite (scripts/test.sh --ci, --full)

Fails, listing each, for a field of ExperimentConfig that no runtime code read in any run and that
no `SETTINGS` entry refuses, warns, or gives a meaning in validation alone (resolved into other fields,
validated). An `*_args` field counts when read as a whole (its keys are a dict's, which the trace does not see: each function's
arguments are checked in the code, tests/test_settings_wired.py). A field of a tagged-union variant counts only when
it was read on that variant (a trainer's
save_interval read on the torch trainer's settings says nothing about veRL's). A section class that appears in
several places (a task set: the training one and each evaluation's) is one class, so a read anywhere counts for all.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from schemas import AlgorithmConfig, ExperimentConfig, schema_walk, support_check


def places() -> list[tuple[str, type[BaseModel], str]]:
    """(schema key, settings class, field) of every field of ExperimentConfig that holds a value: the walk's fields
    (schemas/schema_walk.py), and the algorithm's function fields with their `*_args`, which the walk leaves to the
    function registries."""
    walked = [(n.key, n.model, n.leaf) for n in schema_walk.walk(ExperimentConfig) if n.kind == "field" and n.model]
    return walked + [(f"algorithm.{name}", AlgorithmConfig, name) for name in AlgorithmConfig.model_fields
                     if schema_walk.is_function_field(name)]


def needs_a_reader(key: str) -> bool:
    """Whether the field's meaning is the runtime reading it: not when its `SETTINGS` entry refuses or warns it whatever its
    value, turns it into other fields, or gives it its meaning in validation."""
    found = support_check.entry_for(key)
    if found is None:
        return True  # no entry: honoured, so some run must read it
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
    return sorted(key for key, model, field in places()
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
              "a `SETTINGS` entry, or cover it with a test that runs it:")
        print("\n".join(f"  - {key}" for key in missing))
        return 1
    print(f"settings reads: every setting that needs a reader was read ({len(read(folder))} field reads recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
