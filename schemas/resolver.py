"""The `Resolver` the cross-field rules write to; its own module so that every
rule — schemas/rules.py's and each backend settings class's `check` — writes through the same one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from schemas.base import ConfigRuleError, set_unmarked

if TYPE_CHECKING:
    from schemas.experiment import ExperimentConfig


class Resolver:
    """Collects derived values, warnings and errors while the rules run."""

    def __init__(self, config: ExperimentConfig):
        self.config = config
        self.errors: list[tuple[str, str]] = []

    def derive(self, model: BaseModel, field: str, value: Any, path: str, reason: str) -> None:
        set_unmarked(model, field, value)
        self.config.derived[path] = reason

    def error(self, path: str, msg: str) -> None:
        self.errors.append((path, msg))

    def warn(self, msg: str) -> None:
        self.config.warnings.append(msg)

    def raise_if_errors(self) -> None:
        if self.errors:
            raise ConfigRuleError(self.errors)
