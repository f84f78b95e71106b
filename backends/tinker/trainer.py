"""The Tinker trainer: a LoRA training client on a Tinker server, behind `TrainerBackend`.

It lives in the process of the run that uses it (backends/tinker/policy.py keeps it per experiment)
and is created lazily, on first use: from the base model, from the previous stage's Tinker state
(a chained stage), or — by `load_checkpoint` — from a saved state with its optimizer (a resumed run),
so no LoRA slot of the server is taken for a client that is replaced at once.

Weights never come here: a train step sends datums (backends/tinker/losses.py) and an optim_step;
publishing saves them on the server and hands out their tinker:// path; a checkpoint records the
paths of save_state and save_weights_for_sampler in actor/tinker_state.json (checkpointing/tinker_state.py).

Logprobs: Tinker's trainer and sampler both report logprobs of the unscaled distribution
(temperature 1), so they agree whatever temperature the rollouts were sampled at.

KL toward the reference, the stage's starting model, scored by a sampling client of its weights (the base
model, or a chained stage's previous sampler weights) with `compute_logprobs`, once per step: in the reward
(algorithm.kl_penalty_fn) the batch's advantages are re-made from the penalised rewards before the step, as
the torch trainer does (backends/reward_kl.py), the adaptive coefficient kept in the checkpoint; in the loss
(algorithm.kl_loss_fn) the reference goes to our loss through forward_backward_custom, as it does to a policy loss
that compares with the reference (registered with needs {"reference"}).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import algorithms
from backends.reward_kl import STATE_KEY, RewardKL
from backends.schedule import Schedule
from backends.tinker import losses
from backends.tinker.connection import Endpoint, ServerInfo, endpoint, preflight, service_client, unload_model, wait
from backends.trainer import TrainerBackend
from backends.weights import WeightsHandle
from buffer.experience import Experience
from checkpointing import tinker_state

if TYPE_CHECKING:
    from schemas import ExperimentConfig

logger = logging.getLogger(__name__)


def publishes_state(config: ExperimentConfig, info: ServerInfo) -> bool:
    """Whether versions are published as training states (loaded into a sampler replica) instead of
    sampler weights. Hosted: never, its sampling clients are snapshots. The local server samples in
    the training model's own LoRA slot: that is exact only when the explorer samples the newest
    version while nothing trains (explore and train take turns, a sync every step); otherwise the
    explorer's own replica keeps each version it samples apart from the training weights."""
    if info.snapshots:
        return False
    return not Schedule.of(config).samples_trainer_weights


def scheduled_lr(config: ExperimentConfig, step: int, total_steps: int) -> float:
    """The learning rate of train step `step` (1-based), as the torch trainer's scheduler gives it
    (transformers' constant_with_warmup and cosine_with_min_lr; veRL's are the same): a linear warm-up,
    then constant, or a half cosine from lr down to lr × min_lr_ratio at the last step."""
    opt = config.algorithm.optimizer
    warmup = opt.lr_warmup_steps
    if warmup is None or warmup < 0:
        warmup = int(opt.lr_warmup_steps_ratio * total_steps)
    done = step - 1  # scheduler steps taken before this one
    if done < warmup:
        return opt.lr * done / max(1, warmup)
    if opt.lr_scheduler_type == "constant":
        return opt.lr
    if opt.lr_scheduler_type == "cosine":
        progress = (done - warmup) / max(1, max(total_steps, 1) - warmup)
        factor = 0.5 * (1.0 + math.cos(math.pi * progress))
        return opt.lr * max(0.0, factor * (1.0 - opt.min_lr_ratio) + opt.min_lr_ratio)
    raise ValueError(f"algorithm.optimizer.lr_scheduler_type: {opt.lr_scheduler_type!r} has no schedule on Tinker")


# Both of Trinity's names mean Adam with decoupled weight decay (AdamW), which is what Tinker's AdamParams
# applies, as the other trainers do.
ADAM_OPTIMIZERS = frozenset({"adam", "adamw"})


class TinkerTrainer(TrainerBackend):
    def __init__(self, config: ExperimentConfig, model_dir: Path, total_steps: int, *,
                 ep: Endpoint | None = None, info: ServerInfo | None = None) -> None:
        settings = config.trainer
        ep = ep or endpoint(settings.base_url)
        info = info or preflight(ep, settings.base_model)
        self.config = config
        self.algorithm = config.algorithm
        self.total_steps = total_steps
        self.ep, self.info = ep, info
        self.base_model: str = settings.base_model or config.model.model_path  # type: ignore[assignment]
        self.publish_state = publishes_state(config, info)
        self.pad_datums = 1 if info.snapshots else losses.PAD_DATUMS  # fixed shapes for the local JAX server
        self.plan = losses.plan(config.algorithm, settings.loss_fn)
        self.model_dir = Path(model_dir)
        self.chained = tinker_state.of_model_dir(model_dir)  # a stage after a Tinker stage continues from it
        self.service = service_client(ep)
        self.reward_kl = RewardKL.for_algorithm(config.algorithm)  # algorithm.kl_penalty_fn
        self._client: Any = None
        self._reference: Any = None  # a sampling client of the stage's starting weights, made on first use
        self._step = 0

    # -- the training client -----------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            settings = self.config.trainer
            if self.chained is not None:
                what = f"create a training client from the previous stage's state {self.chained['state_path']}"
                self._client = wait(self.service.create_training_client_from_state(self.chained["state_path"]), what, self.ep)
            else:
                self._client = wait(self.service.create_lora_training_client(
                    base_model=self.base_model, rank=settings.rank, seed=settings.seed, train_mlp=settings.train_mlp,
                    train_attn=settings.train_attn, train_unembed=settings.train_unembed,
                ), f"create a LoRA training client of {self.base_model}", self.ep)
            logger.info("Tinker training client %s (%s, rank %d)", self.model_id, self.base_model, settings.rank)
        return self._client

    @property
    def model_id(self) -> str:
        return str(self._client.model_id) if self._client is not None else ""

    def close(self) -> None:
        """Free the server's LoRA slot of this client and end the session."""
        if self._client is not None:
            unload_model(self.ep, self.model_id)
            self._client = None
        try:
            self.service.close("success").result(timeout=30)
        except Exception:  # noqa: BLE001  (a server that is gone frees its slots itself)
            pass

    # -- TrainerBackend ------------------------------------------------------------------------

    @property
    def global_step(self) -> int:
        return self._step

    def cpu_seconds(self) -> float:
        return 0.0  # the service trains; this process (the flow's) only sends the requests

    def train_step(self, batch: list[Experience]) -> dict[str, float]:
        started = time.perf_counter()
        batch = [e for e in batch if e.response_token_ids]
        if not batch:
            raise ValueError("a train step needs experiences with at least one response token")
        # the reference scores the batch once, for all that needs it: the reward's KL, the loss's KL term, a policy
        # loss that compares with the reference (algorithms.needs_reference_model)
        reference = self.reference_logprobs(batch) if algorithms.needs_reference_model(self.algorithm) else None
        kl_metrics: dict[str, float] = {}
        if self.reward_kl is not None:  # before the step: advantages re-made from the penalised rewards
            batch, kl_metrics = self.reward_kl.apply(batch, lambda _: reference)
        data = losses.padded([losses.datum(e, i) for e, i in zip(batch, losses.step_inputs(self.plan, self.algorithm, batch),
                                                                  strict=True)], self.pad_datums)
        captured: dict[str, float] = {}
        client = self.client
        if self.plan.custom:  # a KL term or a loss that reads the reference always runs here (builtin_loss)
            backward = client.forward_backward_custom(
                data, losses.custom_loss(self.algorithm, batch, captured, reference))
        else:
            backward = client.forward_backward(data, self.plan.tinker_loss, self.plan.config)
        lr = scheduled_lr(self.config, self._step + 1, self.total_steps)
        optim = client.optim_step(self._adam(lr))  # queued behind the backward pass: one round trip
        output = wait(backward, f"train step {self._step + 1}: forward_backward ({self.plan.tinker_loss or 'custom'})", self.ep)
        stepped = wait(optim, f"train step {self._step + 1}: optim_step", self.ep)
        self._step += 1
        current = [losses.response_logprobs(e, out["logprobs"]) for e, out in zip(batch, output.loss_fn_outputs, strict=False)]
        loss = float(output.metrics.get("loss:sum", captured.get("loss", float("nan"))))
        seconds = time.perf_counter() - started
        tokens = sum(len(e.prompt_token_ids) + len(e.response_token_ids) for e in batch)
        metrics = {
            "loss": loss,
            "pg_loss": float(captured.get("pg_loss", loss)),
            **losses.policy_metrics(self.plan, batch, current),
            "lr": lr,
            "train_tokens": float(tokens),
            "train_tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
            "response_length": float(np.mean([len(e.response_token_ids) for e in batch])),
            "tinker/datums": float(len(data)),
            **kl_metrics,
            **({"kl_loss": float(captured["kl_loss"])} if "kl_loss" in captured else {}),
        }
        for key, value in (stepped.metrics or {}).items():
            if key.endswith("grad_norm"):  # skyrl: "skyrl.ai/grad_norm"; hosted may report none
                metrics["grad_norm"] = float(value)
        return metrics

    def logprobs(self, batch: list[Experience]) -> list[list[float]]:
        """Each response token's logprob under the current weights (temperature 1, see module doc)."""
        if not batch:
            return []
        data = losses.padded([losses.datum(e, {"weights": losses.response_mask(e)}) for e in batch], self.pad_datums)
        output = wait(self.client.forward(data, "cross_entropy"), "forward (logprobs)", self.ep)
        return [losses.response_logprobs(e, out["logprobs"]) for e, out in zip(batch, output.loss_fn_outputs, strict=False)]

    def reference_logprobs(self, batch: list[Experience]) -> list[list[float]]:
        """Each response token's logprob under the stage's starting weights (the reference of both KL forms)."""
        from tinker import types

        if self._reference is None:
            if self.chained is not None:  # a stage after a Tinker stage starts from its sampler weights
                path = self.chained["sampler_path"]
                self._reference = wait(self.service.create_sampling_client(model_path=path),
                                       f"the reference's sampling client of {path}", self.ep)
            else:
                self._reference = wait(self.service.create_sampling_client(base_model=self.base_model),
                                       f"the reference's sampling client of {self.base_model}", self.ep)
        # the whole sequence is scored (prompt_logprobs_last_n would spare the prompt, but the self-hosted
        # server does not take it); the response's logprobs are its last ones
        futures = [self._reference.compute_logprobs(types.ModelInput.from_ints([*e.prompt_token_ids, *e.response_token_ids]))
                   for e in batch]
        scored = [wait(f, "compute_logprobs of the reference", self.ep) for f in futures]
        return [[float(x) for x in s[-len(e.response_token_ids):]] for e, s in zip(batch, scored, strict=True)]

    def publish_weights(self, version: int, folder: Path | None) -> WeightsHandle:
        """The current weights as `version`: sampler weights, or a training state for a sampler replica
        (see `publishes_state`); `folder` is not used, the weights stay on the server."""
        name = f"v{version}-{uuid.uuid4().hex[:8]}"
        if self.publish_state:
            path = wait(self.client.save_state(name), f"save_state for version {version}", self.ep).path
        else:
            path = wait(self.client.save_weights_for_sampler(name), f"save_weights_for_sampler for version {version}", self.ep).path
        return WeightsHandle(version=version, kind="tinker", location=str(path))

    def save_checkpoint(self, path: Path) -> None:
        name = f"step{self._step}-{uuid.uuid4().hex[:8]}"
        state = wait(self.client.save_state(name), f"save_state of step {self._step}", self.ep).path
        sampler = wait(self.client.save_weights_for_sampler(name), f"save_weights_for_sampler of step {self._step}", self.ep).path
        tinker_state.write(path, {
            "global_step": self._step, "state_path": str(state), "sampler_path": str(sampler),
            "base_model": self.base_model, "rank": self.config.trainer.rank, "base_url": self.ep.base_url,
            "model_id": self.model_id,
            **({STATE_KEY: self.reward_kl.state_dict()} if self.reward_kl is not None else {}),
        })
        self._write_model_files(path / "huggingface")

    def load_checkpoint(self, path: Path) -> None:
        state = tinker_state.read(path)
        if state is None:
            raise FileNotFoundError(f"{path}: no {tinker_state.FILE} (not a Tinker checkpoint)")
        where = state.get("base_url")
        try:
            client = wait(self.service.create_training_client_from_state_with_optimizer(state["state_path"]),
                          f"restore {state['state_path']}", self.ep)
        except Exception as exc:
            raise RuntimeError(
                f"could not restore the Tinker state {state['state_path']} of {path} (saved on {where}; now using "
                f"{self.ep.base_url}): {type(exc).__name__}: {exc}"
            ) from exc
        if self._client is not None:  # the replaced client's LoRA slot is freed at once
            unload_model(self.ep, self.model_id)
        self._client = client
        self._step = int(state["global_step"])
        if self.reward_kl is not None:
            self.reward_kl.load_state_dict(state.get(STATE_KEY))

    # -- internals -----------------------------------------------------------------------------

    def _write_model_files(self, hf: Path) -> None:
        """Config and tokenizer beside the record (a next stage and `rft convert` read them); a local
        base model's are copied by the checkpoint task, a hub model's are written here."""
        if (self.model_dir / "config.json").is_file() or (hf / "config.json").is_file():
            return
        from transformers import AutoConfig, AutoTokenizer

        AutoConfig.from_pretrained(str(self.model_dir)).save_pretrained(hf)
        AutoTokenizer.from_pretrained(str(self.model_dir)).save_pretrained(hf)

    def _adam(self, lr: float) -> Any:
        from tinker import types

        opt = self.config.algorithm.optimizer
        if opt.optimizer_type not in ADAM_OPTIMIZERS:
            raise ValueError(f"algorithm.optimizer.optimizer_type: {opt.optimizer_type!r} has no Tinker optimizer")
        return types.AdamParams(learning_rate=lr, beta1=opt.betas[0], beta2=opt.betas[1], eps=opt.eps,
                                weight_decay=opt.weight_decay, grad_clip_norm=self.config.trainer.grad_clip)
