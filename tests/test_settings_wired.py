"""Every setting does what it says: each field of the schema is read by the runtime, or refused, or warned.

The schema is walked whole (each tagged-union variant, list item, algorithm preset and `*_args`
function registry) and every place must have an entry in `schemas/support.py`. An entry that says
`honoured("module.py", ...)` is checked against the code: the modules must exist, one of them must read
the field (an attribute access or a string key of that name, docstrings aside), and each value of a
Literal field (each function of a registry, each preset) must appear as a string in one of them, or
have its own refused/warned entry. So a new field that nothing reads fails
here, with every unwired field listed at once.

Per backend: what every trainer implements itself (the optimizer, the arguments of each loss and term
it runs) is checked for each trainer backend on its own — read in that backend's modules
(`TrainerBase.MODULES`), or refused or warned for it (`TrainerBase.ALGORITHM_SETTINGS`) — not by the
name appearing in some other backend's code.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from pydantic import Field

from schemas import ExperimentConfig, support
from schemas.monitor import MonitorConfig
from schemas.trainer import TRAINER_VARIANTS, TinkerTrainerConfig, TorchTrainerConfig, TrainerBase

ROOT = Path(__file__).resolve().parents[1]
HOW_TO = """\
{n} setting(s) of ExperimentConfig are not wired. Give each ONE line in SUPPORT in schemas/support.py:
    "{example}": honoured("tasks/<module>.py"),   # the runtime module(s) that read it
    "{example}": refused("why"),                  # any non-default value fails validation, naming the field
    "{example}": warned("why"),                   # only where ignoring it is harmless
(see the module docstring for variants `x[name]`, list items `x[]` and `[*]`). The problems:
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


def wiring_problems(nodes: list[support.Node]) -> list[str]:
    """Every node without a wired entry, or whose entry the code contradicts."""
    keys = {node.key for node in nodes}
    problems: list[str] = []
    for node in nodes:
        if not node.required:
            continue
        found = support.entry_for(node.key)
        if found is None or not found[1].wired:
            problems.append(f"{node.key}: no entry" if found is None else f"{node.key}: its entry ({found[0]}) "
                            "neither names where it is read nor refuses/warns")
            continue
        entry_key, entry = found
        if entry_key != node.key and not entry_key.endswith("[*]") and "[*]" not in entry_key:
            continue  # below a refused or warned variant/section
        present = [m for m in entry.where if not m.startswith("schemas/") and (ROOT / m).is_file()]
        for module in sorted(set(entry.where) - set(present)):
            problems.append(f"{node.key}: honoured in {module!r}, which is not a runtime module of this repository")
        if node.kind == "field" and present and not any(_reads(m, node.leaf) for m in present):
            problems.append(f"{node.key}: honoured in {', '.join(present)}, which never read{'s' if len(present) == 1 else ''} "
                            f"{node.leaf!r}")
        for module in entry.validated_in:
            if not (ROOT / module).is_file() or not _reads(module, node.leaf):
                problems.append(f"{node.key}: validated in {module}, which never reads {node.leaf!r}")
        for target in entry.resolved_into:
            target_entry = support.entry_for(target)
            if target not in keys and target_entry is None:
                problems.append(f"{node.key}: resolved into {target!r}, which is not a place of the schema")
            elif target_entry is None or not target_entry[1].wired:
                problems.append(f"{node.key}: resolved into {target!r}, which is not wired")
        if entry.where and not entry.passthrough:
            values = node.literals if node.kind == "field" else (node.leaf,) if node.kind == "variant" else ()
            for value in values:
                own = support.SUPPORT.get(f"{node.key}[{value}]")
                if own is not None and own.covers:
                    continue
                if present and not any(value in names_read(m)[1] for m in present):
                    problems.append(f"{node.key}: value {value!r} appears in none of {', '.join(entry.where)} "
                                    f"(handle it there, or give '{node.key}[{value}]' a refused/warned entry)")
    return problems


def trainer_problems(variant: type[TrainerBase], nodes: list[support.Node]) -> list[str]:
    """What `variant`'s backend implements itself but neither reads in its own modules nor refuses or warns."""
    by_key = {node.key: node for node in nodes}
    tag = variant.model_fields["trainer_type"].default
    own = [f for m in variant.MODULES for f in python_files(m)]
    problems = []
    for module in variant.MODULES:
        if not (ROOT / module).exists():
            problems.append(f"trainer[{tag}]: MODULES names {module!r}, which is not in this repository")
    for key in support.trainer_claims(variant):
        node = by_key[key]
        entry = support.trainer_entry(variant, key)
        if entry.unconditional is not None or entry.covers:
            continue  # refused or warned for this backend
        where = [f for m in entry.where for f in python_files(m)] if entry.where else own
        readers = [m for m in [*where, *entry.validated_in] if (ROOT / m).is_file() and _reads(m, node.leaf)]
        if not readers:
            problems.append(f"trainer[{tag}]: {key} is read in none of {', '.join(entry.where or variant.MODULES)}; "
                            f"read it there, or refuse or warn it in {variant.__name__}.ALGORITHM_SETTINGS")
            continue
        if not entry.passthrough:
            for value in node.literals:
                if not any(value in names_read(m)[1] for m in where):
                    problems.append(f"trainer[{tag}]: {key} value {value!r} appears in none of "
                                    f"{', '.join(entry.where or variant.MODULES)}")
    claims = support.trainer_claims(variant)
    generic = {support._VARIANT.sub("[*]", key) for key in claims}
    for key in variant.ALGORITHM_SETTINGS:
        if key not in claims and key not in generic:
            problems.append(f"trainer[{tag}]: ALGORITHM_SETTINGS names {key!r}, which it does not implement")
    return problems


def stale_entries(nodes: list[support.Node]) -> list[str]:
    keys = {node.key for node in nodes}
    generic = {support._VARIANT.sub("[*]", key) for key in keys}
    return sorted(key for key in support.SUPPORT if key not in keys and key not in generic)


def _fail(problems: list[str]) -> str:
    example = problems[0].split(":")[0]
    return HOW_TO.format(n=len(problems), example=example) + "\n".join(f"  - {p}" for p in problems)


def test_every_setting_is_honoured_refused_or_warned():
    problems = wiring_problems(support.walk(ExperimentConfig))
    assert not problems, _fail(problems)


@pytest.mark.parametrize("variant", list(TRAINER_VARIANTS.values()), ids=list(TRAINER_VARIANTS))
def test_each_trainer_backend_honours_what_it_implements_or_refuses_it(variant: type[TrainerBase]):
    problems = trainer_problems(variant, support.walk(ExperimentConfig))
    assert not problems, "\n".join(problems)


def test_a_setting_one_trainer_ignores_fails_for_that_trainer(monkeypatch):
    """The check is per backend: the torch trainer reading min_lr_ratio does not make Tinker honour it."""
    monkeypatch.setattr(TinkerTrainerConfig, "MODULES", ("backends/tinker/policy.py",))
    problems = trainer_problems(TinkerTrainerConfig, support.walk(ExperimentConfig))
    assert any(p.startswith("trainer[tinker]: algorithm.optimizer.min_lr_ratio is read in none of") for p in problems)
    assert trainer_problems(TorchTrainerConfig, support.walk(ExperimentConfig)) == []


def test_no_entry_names_a_setting_that_does_not_exist():
    assert stale_entries(support.walk(ExperimentConfig)) == []


def test_a_new_field_that_nothing_reads_fails_and_is_named():
    class MonitorWithMore(MonitorConfig):
        flush_seconds: int = Field(10, description="A setting added without wiring it.")
        monitor_colour: str = Field("blue", description="Another one.")

    problems = wiring_problems(support.walk_model(MonitorWithMore, "monitor."))
    assert problems == ["monitor.flush_seconds: no entry", "monitor.monitor_colour: no entry"]
    message = _fail(problems)
    assert '"monitor.flush_seconds": honoured("tasks/<module>.py")' in message and "2 setting(s)" in message


def test_an_entry_the_code_contradicts_fails(monkeypatch):
    monkeypatch.setitem(support.SUPPORT, "monitor.tracking_uri", support.honoured("tasks/train.py"))
    monkeypatch.setitem(support.SUPPORT, "monitor.monitor_type", support.honoured("tasks/train.py"))
    problems = wiring_problems(support.walk_model(MonitorConfig, "monitor."))
    assert "monitor.tracking_uri: honoured in tasks/train.py, which never reads 'tracking_uri'" in problems
    assert any(p.startswith("monitor.monitor_type: value 'tensorboard' appears in none of") for p in problems)


@pytest.mark.parametrize("module", sorted({m for e in support.SUPPORT.values() for m in e.where}))
def test_every_module_named_exists(module):
    assert (ROOT / module).is_file()


def test_reward_functions_validation_accepts_are_the_ones_math_workflow_scores_with():
    from workflows import math_workflow

    assert math_workflow.MATH_WORKFLOW_REWARD_FNS is support.MATH_WORKFLOW_REWARD_FNS  # one list, in schemas/rewards.py
