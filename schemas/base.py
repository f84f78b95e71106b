"""Shared base for every settings model, and the error type cross-field rules raise.

Conventions used across `schemas/`:
- every model forbids unknown keys and every field carries a description (Prefect's run form shows it);
- a field the runtime reads needs nothing more: the suite's real runs show it is read (schemas/read_trace.py, checked by
  tests/settings_reads.py). A class's `SETTINGS` says the rest, beside its fields, in the words below: a field refused
  or warned (always, or `.refuse_if(when, reason)` / `.warn_if(...)`), resolved into others, validated only, a
  Literal whose values are a library's names (`honoured(passthrough=True)`), or a note on how it is read.
  schemas/support_check.py collects them over the schema and checks each config against them;
- a value the schema fills in for the user (a preset, a derived size, a default taken from another
  section) is *derived*: it is written into the model without marking the field as user-set and is
  listed in `ExperimentConfig.derived` with the reason. User-set values are never changed silently: the
  few a rule adjusts as Trinity does are listed in `derived` (reason ADJUSTED) and in `warnings`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from schemas import read_trace

# The sections of an experiment (a stage replaces whole ones).
SECTIONS = ("algorithm", "model", "cluster", "buffer", "explorer", "trainer", "synchronizer", "monitor")
# Reasons in `derived` starting with these were set by stage chaining, a Trinity alias or a rule that
# adjusts a user's value as Trinity does: they are the user's own settings now, survive re-validation and
# are checked like any other setting.
STAGE_CHAIN = "stage chaining: "
ALIAS = "alias: "
ADJUSTED = "adjusted: "
KEPT_REASONS = (STAGE_CHAIN, ALIAS, ADJUSTED)
# The error type of a key a section lists in NOT_HERE (schemas/errors.py names the key in its path)
NOT_HERE_ERROR = "not_here"


Level = Literal["refuse", "warn"]
# The modules of the rules that join sections (a `validated()` field is read in one of them)
RULES_MODULES = ("schemas/rules.py", "schemas/rules_buffer.py", "schemas/rules_explorer.py")
# (value, the whole config) -> the rule applies; Any: a section's conditions name no module above it
When = Callable[[Any, Any], bool]


@dataclass(frozen=True)
class Rule:
    level: Level
    reason: str
    # None: whenever the value differs from the default (a variant: whenever it is chosen); else only
    # those non-default values (chosen variants) for which when(value, config) holds
    when: When | None = None


@dataclass(frozen=True)
class Entry:
    resolved_into: tuple[str, ...] = ()  # schema keys validation turns it into
    validated_in: tuple[str, ...] = ()  # schemas/ modules whose rules give the field its whole meaning
    rules: tuple[Rule, ...] = ()
    passthrough: bool = False  # a Literal handed to a library as it is (its values are not in our code)
    note: str = ""
    covers: bool = False  # its rules alone account for the field (refused/warned whenever it would matter)
    per_trainer: bool = False  # each trainer backend implements it: see TrainerBase.ALGORITHM_SETTINGS

    @property
    def unconditional(self) -> Rule | None:
        """The refusal or warning that applies to every non-default value, if any."""
        return next((rule for rule in self.rules if rule.when is None), None)

    def refuse_if(self, when: When, reason: str) -> Entry:
        return replace(self, rules=(*self.rules, Rule("refuse", reason, when)))

    def warn_if(self, when: When, reason: str) -> Entry:
        return replace(self, rules=(*self.rules, Rule("warn", reason, when)))


def honoured(passthrough: bool = False, note: str = "") -> Entry:
    """Read by the runtime (what every setting without an entry is), with a note on how, or `passthrough`: a Literal
    whose values are handed to a library as they are (they are its names, not ours)."""
    return Entry(passthrough=passthrough, note=note)


def per_trainer(note: str = "") -> Entry:
    """A setting every trainer backend implements itself (its optimizer): each trainer variant reads it in
    its own modules (TrainerBase.MODULES) or refuses or warns it (TrainerBase.ALGORITHM_SETTINGS)."""
    return Entry(per_trainer=True, note=note)


def resolved(*into: str, note: str = "") -> Entry:
    return Entry(resolved_into=into, note=note)


def validated(*modules: str, note: str = "") -> Entry:
    """A field whose only meaning is a constraint (or a value) the schema's own rules enforce."""
    return Entry(validated_in=modules or RULES_MODULES, note=note)


def refused(reason: str, when: When | None = None) -> Entry:
    """Refused whenever set to another value than the default (with `when`: those values for which it holds;
    the others behave as the default does)."""
    return Entry(rules=(Rule("refuse", reason, when),), covers=True)


def warned(reason: str, when: When | None = None) -> Entry:
    """Warned whenever set to another value than the default (with `when`: as for `refused`)."""
    return Entry(rules=(Rule("warn", reason, when),), covers=True)


def kept(why: object) -> bool:
    """True when a `derived` reason marks a value as the user's own (see KEPT_REASONS)."""
    return str(why).startswith(KEPT_REASONS)


class Section(BaseModel):
    """Base of every settings model: unknown keys are errors; nested instances are copied on use."""

    model_config = ConfigDict(extra="forbid", revalidate_instances="always", validate_assignment=False)
    # How the runtime treats its settings beyond reading them, keyed by field (`name`, `name[value]`) or by a place
    # below it (`taskset.format.prompt_type`) where that depends on where a shared class sits.
    SETTINGS: ClassVar[dict[str, Entry]] = {}
    # Keys a config may bring here (Trinity's, or a sibling section's) that this section does not have, with why: a
    # feature that is not supported is not a field, and its refusal still explains itself.
    NOT_HERE: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _not_here(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.NOT_HERE and (keys := [k for k in data if k in cls.NOT_HERE]):
            raise PydanticCustomError(NOT_HERE_ERROR, "{why}", {"key": keys[0], "why": cls.NOT_HERE[keys[0]]})
        return data

    def is_set(self, field: str) -> bool:
        """True when the user gave `field` (as opposed to a schema default or a derived value)."""
        return field in self.model_fields_set


read_trace.install(Section)  # only with RFT_TRACE_SETTINGS set: the suite's record of what the runtime reads


class Variant(Section):
    """One variant of a tagged union of sections: its tag (`TAG`, e.g. trainer_type) always counts as
    set, so a dump of what the user set names the variant it came from."""

    TAG: ClassVar[str]

    @classmethod
    def switched_to(cls, data: dict[str, Any]) -> None:
        """`--set` switched a section to this variant: adjust the rest of the raw config `data` (noting each
        change in `data["derived"]`). Settings of the section this variant lacks are dropped by the caller."""

    @model_validator(mode="after")
    def _tag_is_set(self) -> Variant:
        self.__pydantic_fields_set__.add(self.TAG)
        return self


class ConfigRuleError(ValueError):
    """One or more broken cross-field rules, each as (dotted field path, explanation)."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("\n".join(f"{path}: {msg}" for path, msg in problems))


def set_unmarked(model: BaseModel, field: str, value: Any) -> None:
    """Assign a derived value without recording it as user-set (so re-derivation stays possible)."""
    was_set = field in model.model_fields_set
    setattr(model, field, value)
    if not was_set:
        model.__pydantic_fields_set__.discard(field)
