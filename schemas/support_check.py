"""A config checked against schemas/support.py: every refusal and warning its settings meet (`scan`), and the Trinity
import's way of collecting refusals instead of raising them (`collecting`, `path_prefix`)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from schemas.algorithm_registry import FUNCTION_REGISTRIES
from schemas.base import KEPT_REASONS, SECTIONS
from schemas.schema_walk import _literals
from schemas.stage_kind import stage_kind
from schemas.support import SUPPORT, entry_for, trainer_entry
from schemas.wiring import Level, Rule

if TYPE_CHECKING:
    from schemas.experiment_fields import ExperimentFields


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
        found = entry_for(place.key)
        if found is None:
            continue
        entry_key, entry = found
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
