"""One small registry type shared by every kind of algorithm piece (advantage, policy loss, KL, entropy).

A new piece is one decorated function with the model of its arguments beside it:

    class MyLossArgs(Args):
        scale: float = Field(1.0, gt=0, description="...")

    @register_policy_loss_fn("my_loss", MyLossArgs)
    def my_loss(inputs, args): ...

The arguments model is the one place of the function's argument names, types and defaults: the schema
checks `algorithm.<kind>_args` against it and fills in the defaults (`schemas.algorithm_registry`
derives its registries from these), and `resolve_args` gives the function the same defaults.

This package is the bottom layer: `import schemas` imports it, so its modules import neither torch nor
veRL at the top (tests/test_architecture.py holds that): a function imports them inside its body, or
uses the methods of the tensors it is given.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

F = TypeVar("F", bound=Callable[..., Any])

# Names that switch an optional term (KL, entropy, reward-side KL) off.
OFF_NAMES = frozenset({"", "none", "null"})
ROOT = Path(__file__).resolve().parents[1]


def is_off(name: str | None) -> bool:
    """True when an optional term's function name means "disabled"."""
    return name is None or str(name).strip().lower() in OFF_NAMES


class Args(BaseModel):
    """Base of a function's arguments: unknown keys are errors; every field has a default and a description."""

    model_config = ConfigDict(extra="forbid")


class NoArgs(Args):
    """A function without arguments."""


class Registry(dict[str, Callable[..., Any]]):
    """A name -> function dict with a decorator; `args[name]` is the model of that function's arguments.

    ``field`` is the config attribute the names come from; errors quote it so a user knows what to fix.
    """

    def __init__(self, field: str) -> None:
        super().__init__()
        self.field = field
        self.args: dict[str, type[Args]] = {}

    def register(self, name: str, args: type[Args] = NoArgs) -> Callable[[F], F]:
        def decorator(fn: F) -> F:
            if name in self and self[name] is not fn:
                raise ValueError(f"{self.field}: {name!r} is already registered to {self[name].__qualname__}")
            self[name] = fn
            self.args[name] = args
            return fn

        return decorator

    def lookup(self, name: str | None) -> Callable[..., Any]:
        if name is None:
            raise ValueError(
                f"{self.field} is not set (validate the config through ExperimentConfig, which fills it "
                "from the algorithm_type preset)"
            )
        if name not in self:
            raise ValueError(f"{self.field}: unknown name {name!r}; registered: {sorted(self)}")
        return self[name]

    def defaults(self, name: str) -> dict[str, Any]:
        """The default of each argument of `name` (from its arguments model)."""
        model = self.args.get(name, NoArgs)
        return {key: info.get_default(call_default_factory=True) for key, info in model.model_fields.items()}

    def resolve_args(self, name: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """This name's defaults overlaid with the config's ``*_args`` (the schema fills them in already; a
        config built by hand, as in tests, may leave some out)."""
        return {**self.defaults(name), **dict(given or {})}

    def module_path(self, name: str) -> str:
        """The repository path of the module that defines `name` (where its arguments are read)."""
        module = sys.modules[self[name].__module__]
        return Path(module.__file__ or "").resolve().relative_to(ROOT).as_posix()


def import_submodules(package: str, path: list[str], skip: tuple[str, ...] = ("base",)) -> None:
    """Import every module of a package folder, so each one's decorated functions register themselves:
    adding a function is adding its module, with no list to extend."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(path):
        if module.name not in skip and not module.name.startswith("_"):
            importlib.import_module(f"{package}.{module.name}")
