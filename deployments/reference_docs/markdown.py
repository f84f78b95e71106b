"""What both pages are written with: markdown cells and tables, a type or a default in words, and what happens with a
setting in words (a `SETTINGS` entry, each trainer's own entries, the places that agree merged): the
settings page's "what happens" column and the parity page's "here" column."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from schemas import support_check
from schemas.algorithm_registry import BUILT
from schemas.base import RULES_MODULES, Entry, Rule
from schemas.trainer import TRAINER_VARIANTS

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "python -m deployments.reference_docs"  # named on the settings page and by --check


# ============================================================================= markdown
def cell(text: str) -> str:
    """Prose for a table cell: no line breaks, pipes escaped, angle brackets and stars shown as written."""
    return (str(text).replace("\n", " ").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("*", "\\*"))


def code(text: object) -> str:
    text = str(text).replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading (as tests/test_docs.py computes it)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lstrip("#").strip()).lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def table(head: list[str], rows: Iterable[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


# ============================================================================= types and defaults
def unwrap(annotation: Any) -> Any:
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def union_members(annotation: Any) -> list[Any] | None:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return list(typing.get_args(annotation))
    return None


def is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def tag_of(model: type[BaseModel]) -> str:
    """The value of a tagged union's variant's tag field."""
    tag = model.TAG  # type: ignore[attr-defined]
    return str(typing.get_args(model.model_fields[tag].annotation)[0])


def type_text(annotation: Any) -> str:
    annotation = unwrap(annotation)
    args = union_members(annotation)
    models = [a for a in args or [] if is_model(a)]
    if len(models) > 1:  # a tagged union of sections
        tag = models[0].TAG
        return f"section by {tag}: " + " | ".join(tag_of(m) for m in models)
    if args is not None:
        parts = [type_text(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return f"{text} or null" if type(None) in args else text
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return " | ".join(str(v) for v in typing.get_args(annotation))
    if origin is list:
        return f"list of {type_text(typing.get_args(annotation)[0])}"
    if origin is dict:
        value = typing.get_args(annotation)[1]
        return f"mapping of {type_text(value)}" if is_model(value) else "mapping"
    if origin is tuple:
        return "[" + ", ".join(type_text(a) for a in typing.get_args(annotation)) + "]"
    if is_model(annotation):
        return "section"
    if annotation is typing.Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def value_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '""' if value == "" else value
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {value_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        tag = getattr(type(value), "TAG", None)
        return code(getattr(value, tag)) if tag else ""
    return code(value_text(value))


# ============================================================================= what happens, in words
def _rule(rule: Rule) -> str:
    word = "**refused**" if rule.level == "refuse" else "**warned**"
    if rule.when is None:
        return f"{word}: {cell(rule.reason)}"
    return f"{word} in some cases: {cell(rule.reason)}"


def describe(entry: Entry) -> str:
    """One `SETTINGS` entry in words: what reads the setting, what it becomes, its refusals and warnings."""
    parts = []
    if not (entry.resolved_into or entry.validated_in or entry.per_trainer or entry.covers):
        parts.append("read by the runtime" + (" (handed on as written)" if entry.passthrough else ""))
    if entry.resolved_into:
        parts.append("becomes " + ", ".join(code(k) for k in entry.resolved_into))
    if entry.validated_in == RULES_MODULES:
        parts.append(f"a rule of the schema ({code('schemas/rules*.py')})")
    elif entry.validated_in:
        parts.append("a rule of " + ", ".join(code(m) for m in entry.validated_in))
    if entry.per_trainer:
        parts.append("each trainer implements it")
    text = "; ".join(parts)
    if entry.note:
        text += f" ({cell(entry.note)})" if text else cell(entry.note)
    rules = [_rule(r) for r in entry.rules]
    return "<br>".join(p for p in [text, *rules] if p) or "—"


def verdict(key: str) -> str:
    """What happens with the setting at schema key `key` (the ledger's entry, or the refused place above it)."""
    found = support_check.entry_for(key)
    if found is None:
        return "read by the runtime"  # no entry: honoured, as a whole run of the suite shows (tests/settings_reads.py)
    at, entry = found
    if at != key and "[*]" not in at and entry.covers:
        return f"with {code(at)}"  # below a refused or warned section or variant
    return describe(entry)


def trainer_departures(key: str) -> list[str]:
    """How each trainer backend departs from the ledger at an algorithm setting `key` (its ALGORITHM_SETTINGS)."""
    out = []
    function = re.match(r"algorithm\.(\w+)\[([^\]]+)\]", key)
    for tag, variant in TRAINER_VARIANTS.items():
        runs = {"policy_loss_fn": variant.policy_losses(), "kl_loss_fn": variant.KL_LOSSES,
                "entropy_loss_fn": variant.ENTROPY_LOSSES}
        if function and runs.get(function[1]) is not None and function[2] not in runs[function[1]]:
            continue  # a function this trainer does not run (algorithm-matrix.md)
        own = support_check.trainer_entry(variant, key)
        if own != Entry():
            out.append(f"on {code(tag)}: {describe(own)}")
    return out


def merged(places: list[tuple[str, str]], rel: str, extra: Callable[[str], list[str]] | None = None,
           sections: bool = False) -> str:
    """The verdicts of `rel` at each (label, key prefix) place, one line per group of places that agree; `sections`:
    leave out the places where it has no entry (a section is then what its settings are)."""
    groups: dict[str, list[str]] = {}
    for label, prefix in places:
        key = f"{prefix}{rel}"
        if sections and support_check.entry_for(key) is None and not (extra and extra(key)):
            continue
        text = "<br>".join([verdict(key), *(extra(key) if extra else [])])
        groups.setdefault(text, []).append(label)
    if not groups:
        return ""
    if len(groups) == 1:
        return next(iter(groups))
    return "<br>".join(f"{', '.join(code(lb) for lb in labels)}: {text}" for text, labels in groups.items())


def built_module(kind: str, name: str) -> str | None:
    """The module that defines function `name` of registry `kind`, where it is built here."""
    registry = BUILT.get(kind)
    return registry.module_path(name) if registry is not None and name in registry else None


def needs(kind: str, name: str | None) -> list[str]:
    """What a built function declares it needs beyond an ordinary batch (its registry's `needs_of`, where the
    registry declares needs), sorted."""
    registry = BUILT.get(kind)
    needs_of = getattr(registry, "needs_of", None)
    return sorted(needs_of(name)) if needs_of is not None and name in registry else []


def preset_needs(defaults: dict[str, Any]) -> list[str]:
    """What a preset's policy loss and advantage function need (`needs`), together and sorted."""
    return sorted({*needs("policy_loss_fn", defaults.get("policy_loss_fn")),
                   *needs("advantage_fn", defaults.get("advantage_fn"))})
