"""The suite's evidence that each setting is honoured: the fields its real runs read (schemas/read_trace.py).

    python -m tests.settings_reads FOLDER     # after a whole traced run of the suite (scripts/test.sh --ci, --full)

Fails, listing each, for a field of ExperimentConfig that no runtime code read in any run and that
no `SETTINGS` entry refuses, warns, or gives a meaning in validation alone (resolved into other fields,
validated). Each argument of each function a config may name counts when a run read that key of the function's `*_args`
(through algorithms/registry.py FunctionArgs; functions sharing one arguments model share the evidence). A field of a
tagged-union variant counts only when it was read on that variant (a trainer's save_interval read on the torch
trainer's settings says nothing about veRL's). A section class that appears in
several places (a task set: the training one and each evaluation's) is one class, so a read anywhere counts for all.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from pydantic import BaseModel

from schemas import AlgorithmConfig, ExperimentConfig, read_trace, schema_walk, support_check
from schemas.algorithm_registry import FUNCTION_REGISTRIES


def _name(model: type[BaseModel]) -> str:
    return f"{model.__module__}.{model.__qualname__}"


def places() -> list[tuple[str, str, str]]:
    """(schema key, the trace's "model", its "field") of every setting of ExperimentConfig that holds a value: the
    walk's fields (schemas/schema_walk.py), the algorithm's function fields, and each argument of each function they
    may name (`algorithm.<kind>[<name>].<argument>`, read through FunctionArgs)."""
    walked = [(n.key, _name(n.model), n.leaf) for n in schema_walk.walk(ExperimentConfig) if n.kind == "field" and n.model]
    functions = [(f"algorithm.{name}", _name(AlgorithmConfig), name) for name in AlgorithmConfig.model_fields
                 if schema_walk.is_function_field(name)]
    arguments = [(f"algorithm.{kind}[{name}].{arg}", read_trace.ARGUMENTS, _argument(f"{kind}[{name}].{arg}"))
                 for kind, registry in FUNCTION_REGISTRIES.items() for name in registry
                 for arg in registry[name].model_fields]
    return walked + functions + arguments


def _argument(place: str) -> str:
    """`<kind>[<name>].<argument>` as what its read shows: the functions of a kind that share one arguments model (the KL
    estimators, a function and its veRL-named twin) read them in shared code, so a read under any of them counts for
    all; a function with a model of its own must be run."""
    match = re.fullmatch(r"(\w+)\[([^\]]*)\]\.(\w+)", place)
    model = FUNCTION_REGISTRIES.get(match[1], {}).get(match[2]) if match else None
    return f"{match[1]}:{_name(model)}.{match[3]}" if match and model else place


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
                field = _argument(row["field"]) if row["model"] == read_trace.ARGUMENTS else row["field"]
                pairs.add((row["model"], field))
    return pairs


def unread(folder: Path) -> list[str]:
    done = read(folder)
    return sorted(key for key, model, field in places() if (model, field) not in done and needs_a_reader(key))


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
