"""The entries of every settings class collected over the schema (`SUPPORT`, `entry_for`), and a config checked
against them: every refusal and warning its settings meet (`scan`), and the Trinity import's way of collecting
refusals instead of raising them (`collecting`, `path_prefix`).

A setting without an entry is honoured: the runtime reads it, and the suite's real runs are the evidence
(schemas/read_trace.py, checked by tests/settings_reads.py). Entries sit beside their fields, in each class's
`SETTINGS` (the words are schemas/base.py's); the algorithm functions' in schemas/algorithm_registry.py. Collected,
each is keyed by its schema path:

    buffer.batch_size                             a field
    buffer.explorer_input.eval_tasksets[].split   a field of every list item
    trainer[torch].dtype                          a field of one variant of a tagged union
    algorithm.algorithm_type[grpo]                one preset (a value of algorithm_type)
    algorithm.policy_loss_fn[ppo].clip_range      one argument of one function of a registry
    algorithm.policy_loss_fn[*].loss_agg_mode     ... of every function (used when no exact entry exists)
    mode[serve]                                   one value of a Literal field

A refused or warned variant or section covers everything below it. What every trainer implements itself (the
optimizer, the arguments of each loss it runs: `trainer_claims`) is read in that backend's own modules
(`TrainerBase.MODULES`) or refused or warned for it (`TrainerBase.ALGORITHM_SETTINGS`). Values the schema derived
itself (listed in `derived`) are never refused or warned: they are not the user's.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from schemas.algorithm_registry import BUILT, FUNCTION_REGISTRIES
from schemas.base import KEPT_REASONS, SECTIONS, Entry, Level, Rule, Section
from schemas.experiment_fields import ExperimentFields
from schemas.schema_walk import _literals, walk
from schemas.stage_kind import stage_kind
from schemas.trainer import TrainerBase


def _collect() -> dict[str, Entry]:
    """Every class's entries at each place it sits. A class's entry for a place below it (`eval_tasksets[].task_selector.
    seed`) is about that place: it takes the place of the entry the class sitting there has for every place."""
    found: dict[str, Entry] = {}

    def visit(prefix: str, model: type[BaseModel]) -> None:  # a class is visited before the classes below it
        if issubclass(model, Section):
            for key, entry in model.SETTINGS.items():
                found.setdefault(f"{prefix}{key}", entry)

    walk(ExperimentFields, visit)
    return found


SUPPORT: dict[str, Entry] = _collect()
_VARIANT = re.compile(r"\[(?!\])[^\]]+\]")


def ancestors(key: str) -> list[str]:
    """`a.b[x].c` → [`a.b[x]`, `a.b`, `a`]: the places above a key, nearest first."""
    out = []
    for match in reversed(list(re.finditer(r"\.|\[", key))):
        parent = key[: match.start()]
        if parent and parent not in out:
            out.append(parent)
    return out


def entry_for(key: str) -> tuple[str, Entry] | None:
    """The entry that governs `key`: its own, else a refused/warned place above it, else its `[*]` form."""
    if key in SUPPORT:
        return key, SUPPORT[key]
    for parent in ancestors(key):
        entry = SUPPORT.get(parent)
        if entry is not None and entry.covers:
            return parent, entry
    generic = _VARIANT.sub("[*]", key)
    if generic != key and generic in SUPPORT:
        return generic, SUPPORT[generic]
    return None


# Function arguments each trainer backend implements itself (its loss); the optimizer's fields are per_trainer().
TRAINER_FUNCTIONS = ("policy_loss_fn", "kl_loss_fn", "entropy_loss_fn")


def trainer_claims(variant: type[TrainerBase]) -> list[str]:
    """The keys of the algorithm settings `variant`'s backend implements itself: the optimizer's fields, and
    the arguments of each policy loss, KL and entropy term it runs (those refused for every trainer aside)."""
    keys = [key for key, entry in SUPPORT.items() if entry.per_trainer]
    runs = {"policy_loss_fn": variant.policy_losses(), "kl_loss_fn": variant.KL_LOSSES,
            "entropy_loss_fn": variant.ENTROPY_LOSSES}
    for fn in TRAINER_FUNCTIONS:
        registry = BUILT[fn]
        for name in registry if runs[fn] is None else [n for n in runs[fn] if n in registry]:
            for arg in registry.args[name].model_fields:
                key = f"algorithm.{fn}[{name}].{arg}"
                found = entry_for(key)
                if found is None or not found[1].covers:
                    keys.append(key)
    return keys


def trainer_entry(variant: type[TrainerBase], key: str) -> Entry:
    """How `variant`'s backend treats the setting at `key`: its ALGORITHM_SETTINGS entry (exact, or the
    `[*]` form), else nothing (a setting it implements is read in its MODULES)."""
    own = variant.ALGORITHM_SETTINGS
    if key in own:
        return own[key]
    generic = _VARIANT.sub("[*]", key)
    return own.get(generic, Entry())


@dataclass(frozen=True)
class Finding:
    path: str  # the user's dotted path (list indices as numbers)
    key: str  # the schema key of the entry
    level: Level
    reason: str

    @property
    def message(self) -> str:
        return f"{self.reason}"


# Set by `collecting()`: refusals are recorded instead of raised (the Trinity import lists them).
_COLLECT: contextvars.ContextVar[list[Finding] | None] = contextvars.ContextVar("rft_support_collect", default=None)
_PREFIX: contextvars.ContextVar[str] = contextvars.ContextVar("rft_support_prefix", default="")


@contextlib.contextmanager
def collecting() -> Iterator[list[Finding]]:
    """Inside, validation records refusals (with `stages.<i>.` prefixes for stages) instead of raising them."""
    found: list[Finding] = []
    token = _COLLECT.set(found)
    try:
        yield found
    finally:
        _COLLECT.reset(token)


@contextlib.contextmanager
def path_prefix(prefix: str) -> Iterator[None]:
    token = _PREFIX.set(prefix)
    try:
        yield
    finally:
        _PREFIX.reset(token)


def collect_mode() -> list[Finding] | None:
    return _COLLECT.get()


def current_prefix() -> str:
    return _PREFIX.get()


@dataclass
class _Place:
    key: str
    path: str
    value: Any
    default: Any
    variant: bool = False


def scan(config: ExperimentFields) -> list[Finding]:
    """Every refusal and warning the settings of `config` meet (values the schema derived are skipped)."""
    findings: list[Finding] = []
    # values the schema filled in itself; an alias (model.tinker) or stage chaining is the user's own setting
    derived = {path for path, why in config.derived.items() if not str(why).startswith(KEPT_REASONS)}
    kind = stage_kind(config)
    for place in _places(config):
        if place.path in derived or any(place.path.startswith(p + ".") for p in derived):
            continue
        # no entry: nothing to say in general, but the chosen trainer may refuse or warn it (a loss's argument)
        entry_key, entry = entry_for(place.key) or (place.key, Entry())
        covered = entry_key != place.key and not entry_key.endswith("[*]") and "[*]" not in entry_key
        if covered:  # a place below a refused/warned variant or section: reported there
            continue
        chosen = place.variant or place.value != place.default  # a variant chosen, a field set to another value
        rules = list(entry.rules)
        if kind.trains:  # the chosen trainer's own refusals and warnings of what it implements
            rules += trainer_entry(type(config.trainer), place.key).rules
        for rule in rules:
            applies = chosen and (rule.when is None or bool(rule.when(place.value, config)))
            if applies:
                findings.append(Finding(place.path, place.key, rule.level, _describe(place, rule)))
    return findings


def _describe(place: _Place, rule: Rule) -> str:
    if place.variant:
        return f"{place.value!r}: {rule.reason}" if not rule.reason.startswith(f"'{place.value}'") else rule.reason
    return rule.reason


def _places(config: ExperimentFields) -> Iterator[_Place]:
    yield from _model_places(config, "", "", skip={"stages", "derived", "warnings"})
    for i, stage in enumerate(config.stages):
        yield from _model_places(stage, "stages[].", f"stages.{i}.", skip=set(SECTIONS))


def _model_places(model: BaseModel, key_prefix: str, path_prefix_: str, skip: set[str] = frozenset()) -> Iterator[_Place]:
    cls = type(model)
    tag_field = getattr(cls, "TAG", None)
    for name, info in cls.model_fields.items():
        if name in skip or name == tag_field:
            continue
        key, path = f"{key_prefix}{name}", f"{path_prefix_}{name}"
        value = getattr(model, name)
        if cls.__name__ == "AlgorithmConfig" and name in FUNCTION_REGISTRIES:
            yield from _function_places(model, name, key, path)
            continue
        if cls.__name__ == "AlgorithmConfig" and name.removesuffix("_args") in FUNCTION_REGISTRIES:
            continue
        if cls.__name__ == "AlgorithmConfig" and name == "algorithm_type":
            yield _Place(f"{key}[{value}]", path, value, None, variant=True)
        default = info.get_default(call_default_factory=True)
        if isinstance(value, BaseModel):
            tag = getattr(type(value), "TAG", None)
            yield _Place(key, path, value, default)
            if tag is not None:
                vkey = f"{key}[{getattr(value, tag)}]"
                yield _Place(vkey, f"{path}.{tag}", getattr(value, tag), None, variant=True)
                yield from _model_places(value, f"{vkey}.", f"{path}.")
            else:
                yield from _model_places(value, f"{key}.", f"{path}.")
        elif isinstance(value, dict) and value and all(isinstance(v, BaseModel) for v in value.values()):
            yield _Place(key, path, value, default)
            for item_name, item in value.items():
                yield from _model_places(item, f"{key}[].", f"{path}.{item_name}.")
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            yield _Place(key, path, value, default)
            for i, item in enumerate(value):
                tag = getattr(type(item), "TAG", None)
                ikey = f"{key}[]" + (f"[{getattr(item, tag)}]" if tag else "")
                if tag:
                    yield _Place(ikey, f"{path}.{i}.{tag}", getattr(item, tag), None, variant=True)
                yield from _model_places(item, f"{ikey}.", f"{path}.{i}.")
        else:
            yield _Place(key, path, value, default)
            if _literals(info.annotation) and value is not None and f"{key}[{value}]" in SUPPORT:
                yield _Place(f"{key}[{value}]", path, value, None, variant=True)


def _function_places(alg: BaseModel, fn: str, key: str, path: str) -> Iterator[_Place]:
    name = getattr(alg, fn)
    if name is None:
        return
    yield _Place(f"{key}[{name}]", path, name, None, variant=True)
    args_model = FUNCTION_REGISTRIES[fn].get(name)
    if args_model is None:
        return
    defaults = {k: f.get_default(call_default_factory=True) for k, f in args_model.model_fields.items()}
    for arg, value in (getattr(alg, f"{fn}_args") or {}).items():
        yield _Place(f"{key}[{name}].{arg}", f"{path}_args.{arg}", value, defaults.get(arg))
