"""One small registry type shared by every kind of algorithm piece (advantage, policy loss, KL, entropy).

A new piece is one decorated function with the model of its arguments beside it:

    class MyLossArgs(Args):
        scale: float = Field(1.0, gt=0, description="...")

    @register_policy_loss_fn("my_loss", MyLossArgs)
    def my_loss(inputs, args): ...

The arguments model is the one place of the function's argument names, types and defaults: the schema
checks `algorithm.<kind>_args` against it and fills in the defaults (`schemas.algorithm_registry`
derives its registries from these), and `resolve_args` gives the function the same defaults.

A piece that needs more than a batch of sampled rows with their log-probs and advantages says so where it is
registered: `register(name, Args, needs={"reference"})` (the `Need`s below). Each trainer backend declares what
it provides (`TrainerBase.CANNOT` in schemas/trainer.py), a backend runs a piece when the piece's needs are a
subset, and its refusal is generated from the need it lacks; the predicates the runtime asks (`needs_critic`,
`is_preference_loss`, ...: algorithms/needs.py) read the same declarations.

This package is the bottom layer: `import schemas` imports it, so its modules import neither torch nor
veRL at the top (tests/test_architecture.py holds that): a function imports them inside its body, or
uses the methods of the tensors it is given.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict

F = TypeVar("F", bound=Callable[..., Any])

# Names that switch an optional term (KL, entropy, reward-side KL) off.
OFF_NAMES = frozenset({"", "none", "null"})
ROOT = Path(__file__).resolve().parents[1]

# What a piece can need beyond an ordinary batch (sampled rows, their log-probs, one advantage per token), and
# what each is, as a refusal names it ("'dpo' needs <text>, which trainer_type ... cannot train with: <why>").
Need = Literal["pairs", "reference", "critic", "teacher", "groups", "greedy_baseline", "expert_rows", "steps",
               "batch_mask", "teacher_topk"]
NEEDS: tuple[Need, ...] = get_args(Need)
NEED_TEXT: dict[Need, str] = {
    "pairs": "(chosen, rejected) pairs of a preference dataset, each kept whole in one micro-batch",
    "reference": "the reference model's logprobs of each response token",
    "critic": "a critic (GAE over its values)",
    "teacher": "a teacher's log-probs of each sampled token (an auxiliary model scores them on the explorer)",
    "groups": "several responses to each task, whole groups in a batch",
    "greedy_baseline": "each task's greedy answer, sampled on the explorer beside its group",
    "expert_rows": "expert (SFT) rows beside the sampled ones in each batch",
    "steps": "its own advantage for each model turn of an episode",
    "batch_mask": "a token mask chosen over the whole batch's log-probs before the loss",
    "teacher_topk": "the student's log-probs of the teacher's top-k tokens at each position (the whole distribution)",
}


def is_off(name: str | None) -> bool:
    """True when an optional term's function name means "disabled"."""
    return name is None or str(name).strip().lower() in OFF_NAMES


class FunctionArgs(dict[str, Any]):
    """A function's arguments as the runtime reads them: a dict that tells the settings trace
    (schemas/read_trace.py, which sets `on_read`) each key read, as `<kind>[<name>].<key>`. A copy (`{**args}`,
    `dict(args)`) is a plain dict, whose reads it does not see."""

    on_read: ClassVar[Callable[[str], None] | None] = None

    def __init__(self, kind: str, name: str, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        self.place = f"{kind.removeprefix('algorithm.')}[{name}]"

    def __getitem__(self, key: str) -> Any:
        if FunctionArgs.on_read is not None:
            FunctionArgs.on_read(f"{self.place}.{key}")
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        if FunctionArgs.on_read is not None:
            FunctionArgs.on_read(f"{self.place}.{key}")
        return super().get(key, default)


def args_of(algorithm: Any, kind: str) -> FunctionArgs:
    """`algorithm.<kind>_args` (the schema has filled in each default) for the function `algorithm.<kind>` names."""
    return FunctionArgs(kind, getattr(algorithm, kind, None) or "", getattr(algorithm, f"{kind}_args", None) or {})


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
        self.needs: dict[str, frozenset[Need]] = {}

    def register(self, name: str, args: type[Args] = NoArgs, needs: Collection[Need] = ()) -> Callable[[F], F]:
        unknown = set(needs) - set(NEEDS)
        if unknown:
            raise ValueError(f"{self.field}: {name!r} needs {sorted(unknown)}, which are not Needs: {NEEDS}")

        def decorator(fn: F) -> F:
            if name in self and self[name] is not fn:
                raise ValueError(f"{self.field}: {name!r} is already registered to {self[name].__qualname__}")
            self[name] = fn
            self.args[name] = args
            self.needs[name] = frozenset(needs)
            return fn

        return decorator

    def unregister(self, name: str) -> None:
        """Forget `name` (a test's own piece, registered for the test)."""
        self.pop(name, None)
        self.args.pop(name, None)
        self.needs.pop(name, None)

    def needs_of(self, name: str | None) -> frozenset[Need]:
        """What piece `name` needs (nothing for a name not registered: an error of its own elsewhere)."""
        return self.needs.get(name or "", frozenset())

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

    def resolve_args(self, name: str, given: Mapping[str, Any] | None, kind: str | None = None) -> FunctionArgs:
        """This name's defaults overlaid with the config's ``*_args`` (the schema fills them in already; a
        config built by hand, as in tests, may leave some out). `kind`: the field they are of, when not this
        registry's (the reward's KL penalty takes the KL losses' estimators)."""
        return FunctionArgs(kind or self.field, name, {**self.defaults(name), **dict(given or {})})

    def module_path(self, name: str) -> str:
        """The repository path of the module that defines `name`."""
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
