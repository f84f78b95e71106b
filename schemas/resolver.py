"""The `Resolver` the cross-field rules write to; its own module so that every
rule — schemas/rules.py's and each backend settings class's `check` — writes through the same one."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from schemas.base import ConfigRuleError, set_unmarked
from schemas.sections import Sections

C = TypeVar("C", bound=Sections, covariant=True)


class Resolver(Generic[C]):
    """Collects derived values, warnings and errors while the rules run: the experiment's (Resolver[ExperimentConfig])
    see every section, a backend's see Resolver[Sections]."""

    def __init__(self, config: C):
        self.config = config
        self.errors: list[tuple[str, str]] = []

    def derive(self, model: BaseModel, field: str, value: Any, path: str, reason: str) -> None:
        set_unmarked(model, field, value)
        self.config.derived[path] = reason

    def error(self, path: str, msg: str) -> None:
        self.errors.append((path, msg))

    def args_errors(self, path: str, owner: str, model: type[BaseModel], exc: ValidationError) -> None:
        """Each error in the arguments of `owner` (a function, a generator) given at `path`, naming its key."""
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            msg = (f"{owner} has no argument {loc!r}; its arguments: {sorted(model.model_fields)}"
                   if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, "))
            self.error(f"{path}.{loc}", msg)

    def warn(self, msg: str) -> None:
        self.config.warnings.append(msg)

    def raise_if_errors(self) -> None:
        if self.errors:
            raise ConfigRuleError(self.errors)
