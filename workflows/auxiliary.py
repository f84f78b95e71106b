"""Auxiliary models as workflows reach them: by name (`explorer.auxiliary_models[].name`), each its engines and its
own chat template. A judge, a user simulator or an answerer is one of these; the policy's engines are not."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from backends.rollout import RolloutEngine, Sample, SamplingSettings
from workflows.render import ChatRenderer, Messages


@dataclass
class AuxiliaryModel:
    """One auxiliary model: its engines (taken in turn) and its renderer."""

    name: str
    engines: Sequence[RolloutEngine]
    renderer: ChatRenderer
    _turn: itertools.count = field(default_factory=itertools.count, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def chat(self, messages: Messages, settings: SamplingSettings) -> list[Sample]:
        """`settings.n` replies of this model to `messages` (its chat template), their text decoded."""
        with self._lock:
            engine = self.engines[next(self._turn) % len(self.engines)]
        (samples,) = engine.generate([self.renderer.render(messages)], settings)
        return self.renderer.with_text(samples)


class NoSuchAuxiliaryModel(ValueError):
    """A workflow asked for an auxiliary model the experiment does not start."""


def pick(models: dict[str, AuxiliaryModel], name: str | None, asked_by: str) -> AuxiliaryModel:
    """The auxiliary model `name` (None: the first one), or an error naming explorer.auxiliary_models."""
    if not models:
        raise NoSuchAuxiliaryModel(f"{asked_by} needs an auxiliary model: add one to explorer.auxiliary_models")
    if name is None:
        return next(iter(models.values()))
    if name not in models:
        raise NoSuchAuxiliaryModel(f"{asked_by}: no auxiliary model named {name!r}; explorer.auxiliary_models has "
                                   f"{sorted(models)}")
    return models[name]
