"""What the code says about each setting, checked statically (the suite's real runs show that each is read:
tests/settings_reads.py, after a whole run).

The schema is walked whole (each tagged-union variant, list item, algorithm preset and `*_args` function registry).
An entry of a class's `SETTINGS` (collected by `schemas/support_check.py`) must name places that exist; a field it
resolves into must be a place of the schema; a module it says validates a field must read it. Each value of a Literal
field must appear as a string in the runtime's code (outside schemas/, tests/ and deployments/), unless it has its own
refused/warned entry or the field's values are a library's own names (`passthrough`). A function's arguments are read
through algorithms/registry.py's FunctionArgs, whose reads the whole run records as it does the fields'.

Per backend: what every trainer implements itself (the optimizer, the arguments of each loss and term it runs) is
checked for each trainer backend on its own: read in that backend's modules (`TrainerBase.MODULES`), or refused or
warned for it (`TrainerBase.ALGORITHM_SETTINGS`), not by the name appearing in some other backend's code.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field

from schemas import ExperimentConfig, base, schema_walk, support_check
from schemas.monitor import MonitorConfig
from schemas.trainer import TRAINER_VARIANTS, TinkerTrainerConfig, TorchTrainerConfig, TrainerBase

ROOT = Path(__file__).resolve().parents[1]
HOW_TO = """\
{n} problem(s) between the `SETTINGS` entries and the code (see its docstring; a setting without an entry is honoured, and
a whole run of the suite shows that it is read):
"""


def python_files(module: str) -> list[str]:
    """`module`, or every .py file under it when it names a folder (ending in /)."""
    if module.endswith("/"):
        return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / module).rglob("*.py"))
    return [module]


@functools.cache
def names_read(module: str) -> tuple[frozenset[str], frozenset[str]]:
    """(attribute names, string constants) of a module's code, docstrings left out."""
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    docstrings = {
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and (body := node.body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    }
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    strings = {n.value for n in ast.walk(tree)
               if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings}
    return frozenset(attrs), frozenset(strings)


def _reads(module: str, name: str) -> bool:
    attrs, strings = names_read(module)
    return name in attrs or name in strings


@functools.cache
def runtime_strings() -> frozenset[str]:
    """Every string constant of the runtime's code: the modules outside schemas/, tests/ and deployments/."""
    skip = ("schemas", "tests", "deployments", ".venv", "benchmarks", "scripts")
    modules = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py")
               if not p.relative_to(ROOT).parts[0].startswith(skip) and not p.relative_to(ROOT).parts[0].startswith(".")]
    return frozenset().union(*(names_read(m)[1] for m in modules))


def wiring_problems(nodes: list[schema_walk.Node]) -> list[str]:
    """Each entry the code contradicts, and each Literal value no runtime code names."""
    keys = {node.key for node in nodes}
    problems: list[str] = []
    for node in nodes:
        found = support_check.entry_for(node.key)
        entry_key, entry = found if found is not None else (node.key, base.honoured())
        if entry_key != node.key and not entry_key.endswith("[*]") and "[*]" not in entry_key:
            continue  # below a refused or warned variant/section
        if entry.validated_in and not any((ROOT / m).is_file() and _reads(m, node.leaf) for m in entry.validated_in):
            problems.append(f"{node.key}: validated in {', '.join(entry.validated_in)}, which never read "
                            f"{node.leaf!r}")
        for target in entry.resolved_into:
            if target not in keys and support_check.entry_for(target) is None:
                problems.append(f"{node.key}: resolved into {target!r}, which is not a place of the schema")
        if entry.passthrough or entry.covers or entry.unconditional or entry.resolved_into or entry.validated_in \
                or node.kind != "field":
            continue
        for value in node.literals:
            own = support_check.SUPPORT.get(f"{node.key}[{value}]")
            if own is not None and own.covers:
                continue
            if value not in runtime_strings():
                problems.append(f"{node.key}: value {value!r} appears nowhere in the runtime's code (handle it, or give "
                                f"'{node.key}[{value}]' a refused/warned `SETTINGS` entry)")
    return problems


def trainer_problems(variant: type[TrainerBase], nodes: list[schema_walk.Node]) -> list[str]:
    """What `variant`'s backend implements itself but neither reads in its own modules nor refuses or warns."""
    by_key = {node.key: node for node in nodes}
    tag = variant.model_fields["trainer_type"].default
    own = [f for m in variant.MODULES for f in python_files(m)]
    problems = []
    for module in variant.MODULES:
        if not (ROOT / module).exists():
            problems.append(f"trainer[{tag}]: MODULES names {module!r}, which is not in this repository")
    for key in support_check.trainer_claims(variant):
        node = by_key[key]
        entry = support_check.trainer_entry(variant, key)
        if entry.unconditional is not None or entry.covers:
            continue  # refused or warned for this backend
        where = own
        readers = [m for m in [*where, *entry.validated_in] if (ROOT / m).is_file() and _reads(m, node.leaf)]
        if not readers:
            problems.append(f"trainer[{tag}]: {key} is read in none of {', '.join(variant.MODULES)}; "
                            f"read it there, or refuse or warn it in {variant.__name__}.ALGORITHM_SETTINGS")
            continue
        if not entry.passthrough:
            for value in node.literals:
                if not any(value in names_read(m)[1] for m in where):
                    problems.append(f"trainer[{tag}]: {key} value {value!r} appears in none of "
                                    f"{', '.join(variant.MODULES)}")
    claims = support_check.trainer_claims(variant)
    generic = {support_check._VARIANT.sub("[*]", key) for key in claims}
    for key in variant.ALGORITHM_SETTINGS:
        if key not in claims and key not in generic:
            problems.append(f"trainer[{tag}]: ALGORITHM_SETTINGS names {key!r}, which it does not implement")
    return problems


def stale_entries(nodes: list[schema_walk.Node]) -> list[str]:
    keys = {node.key for node in nodes}
    generic = {support_check._VARIANT.sub("[*]", key) for key in keys}
    return sorted(key for key in support_check.SUPPORT if key not in keys and key not in generic)


def _fail(problems: list[str]) -> str:
    example = problems[0].split(":")[0]
    return HOW_TO.format(n=len(problems), example=example) + "\n".join(f"  - {p}" for p in problems)


def test_every_entry_agrees_with_the_code_and_every_named_value_is_handled():
    problems = wiring_problems(schema_walk.walk(ExperimentConfig))
    assert not problems, _fail(problems)


@pytest.mark.parametrize("variant", list(TRAINER_VARIANTS.values()), ids=list(TRAINER_VARIANTS))
def test_each_trainer_backend_honours_what_it_implements_or_refuses_it(variant: type[TrainerBase]):
    problems = trainer_problems(variant, schema_walk.walk(ExperimentConfig))
    assert not problems, "\n".join(problems)


def test_a_setting_one_trainer_ignores_fails_for_that_trainer(monkeypatch):
    """The check is per backend: the torch trainer reading min_lr_ratio does not make Tinker honour it."""
    monkeypatch.setattr(TinkerTrainerConfig, "MODULES", ("backends/tinker/policy.py",))
    problems = trainer_problems(TinkerTrainerConfig, schema_walk.walk(ExperimentConfig))
    assert any(p.startswith("trainer[tinker]: algorithm.optimizer.min_lr_ratio is read in none of") for p in problems)
    assert trainer_problems(TorchTrainerConfig, schema_walk.walk(ExperimentConfig)) == []


def test_no_entry_names_a_setting_that_does_not_exist():
    assert stale_entries(schema_walk.walk(ExperimentConfig)) == []


def test_an_entry_the_code_contradicts_fails(monkeypatch):
    monkeypatch.setitem(support_check.SUPPORT, "monitor.tracking_uri", base.validated("tasks/train.py"))
    monkeypatch.setitem(support_check.SUPPORT, "monitor.experiment_name", base.resolved("monitor.nowhere"))
    problems = wiring_problems(schema_walk.walk_model(MonitorConfig, "monitor."))
    assert "monitor.tracking_uri: validated in tasks/train.py, which never read 'tracking_uri'" in problems
    assert "monitor.experiment_name: resolved into 'monitor.nowhere', which is not a place of the schema" in problems


def test_a_literal_value_no_code_handles_fails_and_is_named():
    class MonitorWithMore(MonitorConfig):
        monitor_colour: Literal["mlflow", "ultraviolet-ish"] = Field("mlflow", description="A setting added unhandled.")

    problems = wiring_problems(schema_walk.walk_model(MonitorWithMore, "monitor."))
    assert [p.split(" (")[0] for p in problems] == [
        "monitor.monitor_colour: value 'ultraviolet-ish' appears nowhere in the runtime's code"]


def test_reward_functions_validation_accepts_are_the_ones_math_workflow_scores_with():
    from schemas import rewards
    from workflows import math_workflow

    assert math_workflow.MATH_WORKFLOW_REWARD_FNS is rewards.MATH_WORKFLOW_REWARD_FNS  # one list, in schemas/rewards.py
