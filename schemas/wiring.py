"""The words an entry of schemas/support.py is written in: how the runtime treats one setting.

A setting without an entry is honoured: the runtime reads it, and the suite's real runs show it
(schemas/read_trace.py, checked by tests/settings_reads.py after a whole run). An entry says more:
- `honoured(note=..., passthrough=...)`: what reading it does, or that a Literal's values are a library's own names;
- `resolved("other.path", ...)`: validation turns it into these fields, themselves wired;
- `validated()`: its whole meaning is a constraint that the schema's rules enforce;
- `refused(reason)`: a value other than the default (or, for a variant, choosing it) is an error at
  validation naming the field and the reason;
- `warned(reason)`: the same, as a warning (only where ignoring it is harmless).
Honoured fields can carry conditional refusals or warnings (`.refuse_if(when, reason)`, `.warn_if(when, reason)`).

Its own module so that a backend's settings class (schemas/trainer.py, schemas/explorer.py) can say how
its backend treats each of its settings, and schemas/support.py collect them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

Level = Literal["refuse", "warn"]
# The modules of the rules that join sections (a `validated()` field is read in one of them)
RULES_MODULES = ("schemas/rules.py", "schemas/rules_buffer.py", "schemas/rules_explorer.py")
# (value, the whole ExperimentConfig) -> the rule applies; Any: the backends' settings classes write these and name no
# module above them (schemas/sections.py)
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
    where: tuple[str, ...] = ()  # a function of a registry and its arguments: the module that defines it (derived)
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


def read_in(*modules: str, note: str = "") -> Entry:
    """A function's argument read in these modules rather than the function's own: an `*_args` key is a dict's, which
    the read trace does not see, so the modules are named (tests/test_settings_wired.py checks each reads it)."""
    return Entry(where=modules, note=note)


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
