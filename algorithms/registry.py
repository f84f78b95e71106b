"""One small registry type shared by every kind of algorithm piece (advantage, policy loss, KL, entropy).

A new piece is one decorated function: ``@ADVANTAGE_FNS.register("name", defaults={...})``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

# Names that switch an optional term (KL, entropy, reward-side KL) off.
OFF_NAMES = frozenset({"", "none", "null"})


def is_off(name: str | None) -> bool:
    """True when an optional term's function name means "disabled"."""
    return name is None or str(name).strip().lower() in OFF_NAMES


class Registry(dict[str, Callable[..., Any]]):
    """A name -> function dict with a decorator and per-name default arguments.

    ``field`` is the config attribute the names come from; errors quote it so a user knows what to fix.
    """

    def __init__(self, field: str) -> None:
        super().__init__()
        self.field = field
        self.defaults: dict[str, dict[str, Any]] = {}

    def register(self, name: str, *, defaults: Mapping[str, Any] | None = None) -> Callable[[F], F]:
        def decorator(fn: F) -> F:
            if name in self and self[name] is not fn:
                raise ValueError(f"{self.field}: {name!r} is already registered to {self[name].__qualname__}")
            self[name] = fn
            self.defaults[name] = dict(defaults or {})
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

    def resolve_args(self, name: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """This name's defaults overlaid with the config's ``*_args`` (the schema fills them; it may lag)."""
        return {**self.defaults.get(name, {}), **dict(given or {})}
