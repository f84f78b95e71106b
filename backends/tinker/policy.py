"""The Tinker policy: training and sampling on a Tinker server; nothing runs here but HTTP clients.

No Ray, no vLLM, no GPU. The training client must outlive a task (the server holds its LoRA weights
and optimizer state), so the trainer and the sampler live in the run's own process, in a small
registry keyed by experiment id: every task of a run (they share the flow's process, also when the
explorer and the trainer run side by side in threads) finds them there. A retried run is a new
process: it starts them again and `restore_checkpoint` puts the trainer back on its latest saved
state. An explorer in another process (mode explore) has only a sampler, made from the published
tinker:// paths it finds in sync/published.json.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from backends.policy import Policy
from backends.tinker.connection import Endpoint, ServerInfo, endpoint, preflight
from backends.tinker.engine import TinkerEngine
from backends.tinker.losses import plan
from backends.tinker.trainer import TinkerTrainer, publishes_state
from backends.weights import WeightsHandle
from checkpointing import tinker_state

logger = logging.getLogger(__name__)

_LOCK = threading.RLock()
_TRAINERS: dict[str, TinkerTrainer] = {}
_ENGINES: dict[str, TinkerEngine] = {}


class TinkerPolicy(Policy):
    """The experiment's Tinker trainer and sampler, in this process."""

    @property
    def engine_name(self) -> str:
        return f"{self.experiment}-tinker-sampler"

    @property
    def base_model(self) -> str:
        return self.config.trainer.base_model or self.config.model.model_path  # type: ignore[union-attr, return-value]

    # -- bring up ------------------------------------------------------------------------------

    def connect(self) -> dict[str, float]:
        _, info = self._server()
        return {"tinker_models": float(len(info.models))}

    def check_requirements(self) -> list[str]:
        ep, info = self._server()
        settings = self.config.trainer
        loss = plan(self.config.algorithm, getattr(settings, "loss_fn", "auto"))
        published = "training states, sampled through a replica" if publishes_state(self.config, info) else "sampler weights"
        return [
            f"Tinker API key: from {ep.key_source}",
            f"Tinker server: {ep.base_url} (from {ep.url_source}), {info.kind}; serves {', '.join(info.models) or '?'}",
            f"trainer: LoRA rank {settings.rank} of {self.base_model}, loss {loss.tinker_loss or 'custom'} "
            f"({self.config.algorithm.policy_loss_fn}); versions published as {published}; no vLLM engine, no GPU",
        ]

    def start_engines(self, model_dir: str) -> list[str]:
        with _LOCK:
            if self.experiment not in _ENGINES:
                ep, info = self._server()
                _ENGINES[self.experiment] = TinkerEngine(
                    self.engine_name, ep, info, self.base_model, model_dir,
                    seed=self.config.explorer.rollout_model.seed, initial=self._initial_weights(model_dir, info),
                )
        return [self.engine_name]

    def start_trainer(self, model_dir: str, total_steps: int) -> str:
        with _LOCK:
            if self.experiment not in _TRAINERS:
                ep, info = self._server()
                _TRAINERS[self.experiment] = TinkerTrainer(self.config, Path(model_dir), total_steps, ep=ep, info=info)
        return f"{self.experiment}-tinker-trainer"

    # -- use -----------------------------------------------------------------------------------

    @property
    def trainer(self) -> TinkerTrainer:
        try:
            return _TRAINERS[self.experiment]
        except KeyError:
            raise LookupError(f"no Tinker trainer of {self.experiment} in this process: start_trainer first") from None

    def engines(self) -> list[TinkerEngine]:
        try:
            return [_ENGINES[self.experiment]]
        except KeyError:
            raise LookupError(f"no Tinker sampler of {self.experiment} in this process: start_engines first") from None

    def publish(self, version: int) -> WeightsHandle:
        return self.trainer.publish_weights(version, None)

    def load(self, weights: WeightsHandle) -> None:
        for engine in self.engines():
            engine.load_weights(weights)

    def revive(self) -> list[str]:
        return []  # nothing runs here that could die on its own; a server that died fails the next call

    def release(self, engines: bool = True, trainer: bool = True) -> None:
        with _LOCK:
            engine = _ENGINES.pop(self.experiment, None) if engines else None
            training = _TRAINERS.pop(self.experiment, None) if trainer else None
        for part in (engine, training):
            if part is not None:
                part.close()

    # -- internals -----------------------------------------------------------------------------

    def _server(self) -> tuple[Endpoint, ServerInfo]:
        ep = endpoint(getattr(self.config.trainer, "base_url", None))  # a Tinker trainer's setting
        return ep, preflight(ep, self.base_model)

    def _initial_weights(self, model_dir: str, info: ServerInfo) -> WeightsHandle | None:
        """Version 0: the base model (None), or the state a previous Tinker stage ended with."""
        chained = tinker_state.of_model_dir(model_dir)
        if chained is None:
            return None
        path = chained["sampler_path"] if info.snapshots else chained["state_path"]
        return WeightsHandle(version=0, kind="tinker", location=path)
