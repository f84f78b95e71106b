"""Shared base for every settings model, and the error type cross-field rules raise.

Conventions used across `schemas/`:
- every model forbids unknown keys and every field carries a description (Prefect's run form shows it);
- a value the schema fills in for the user (a preset, a derived size, a default taken from another
  section) is *derived*: it is written into the model without marking the field as user-set and is
  listed in `ExperimentConfig.derived` with the reason. User-set values are never changed silently: the
  few a rule adjusts as Trinity does are listed in `derived` (reason ADJUSTED) and in `warnings`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator

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


def kept(why: object) -> bool:
    """True when a `derived` reason marks a value as the user's own (see KEPT_REASONS)."""
    return str(why).startswith(KEPT_REASONS)


class Section(BaseModel):
    """Base of every settings model: unknown keys are errors; nested instances are copied on use."""

    model_config = ConfigDict(extra="forbid", revalidate_instances="always", validate_assignment=False)

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
