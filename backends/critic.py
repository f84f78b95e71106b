"""The critic of PPO with GAE (advantage_fn 'ppo') on the torch trainer: a value model, its optimizer, and
its step. veRL's order within a train step: the critic scores the batch (the old values), GAE makes the
advantages and returns from them (algorithms.gae), the critic takes `ppo_epochs` steps on the clipped value loss
(algorithms.value_loss; metrics are their means), and the policy trains on the advantages.

The value model is `model.critic_model_path` (by default the policy's model) loaded as transformers'
token-classification model with one label: the base model's hidden states and a linear head (new,
seeded from the run's RNG), as veRL's critic is. V_j, the value of the state before response token j,
is read at the column whose logits predict token j. Checkpoints hold its weights as safetensors and its
optimizer state as tensors (loaded weights_only), in `global_step_N/critic/` beside the actor's (veRL's
layout).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForTokenClassification

import algorithms
from backends.batch import TrainBatch, stack_padded
from checkpointing.models import resolve_model_path
from checkpointing.safe_load import load_tensors

if TYPE_CHECKING:
    from schemas import ExperimentConfig

WEIGHTS = "critic.safetensors"
OPTIM_STATE = "critic_optim_state.pt"


def critic_dir(actor_dir: Path) -> Path:
    """Where a checkpoint keeps the critic: beside the actor's folder (global_step_N/critic)."""
    return Path(actor_dir).parent / "critic"


def value_metrics(returns: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """How well the old values [B, R] predicted the returns, over the response tokens (every trainer's critic logs
    these under the same names)."""
    tokens = max(float(mask.sum()), 1.0)
    return {
        "critic/vf_explained_var": algorithms.explained_variance(returns, values, mask),
        "critic/values_mean": float((values * mask).sum() / tokens),
        "critic/returns_mean": float((returns * mask).sum() / tokens),
    }


class Critic:
    """The value model and its optimizer; `step` runs the critic's part of a train step."""

    def __init__(self, config: ExperimentConfig, model_dir: Path, device: torch.device, dtype: torch.dtype,
                 schedule: Callable[[torch.optim.Optimizer], Any]) -> None:
        """`schedule`: the policy's learning-rate schedule, applied to the critic's optimizer (its own lr)."""
        settings = config.trainer.critic
        self.settings = settings
        self.device = device
        self.gae_args = algorithms.ADVANTAGE_FNS.resolve_args("ppo", config.algorithm.advantage_fn_args)
        path = config.model.critic_model_path
        source = resolve_model_path(path) if path else model_dir
        # no dropout in the head: values must be the same function in the scoring and the training pass
        model_config = AutoConfig.from_pretrained(source, num_labels=1)
        model_config.classifier_dropout = 0.0
        self.model = AutoModelForTokenClassification.from_pretrained(source, config=model_config, dtype=dtype).to(device)
        self.model.config.use_cache = False
        if config.trainer.gradient_checkpointing:  # as the policy: recompute activations in backward
            self.model.gradient_checkpointing_enable()
        opt = config.algorithm.optimizer
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=settings.optim.lr, betas=tuple(opt.betas), eps=opt.eps,
            weight_decay=opt.weight_decay, fused=True,
        )
        self.scheduler = schedule(self.optimizer)

    def values(self, micro: TrainBatch, grad: bool = False) -> torch.Tensor:
        """[B, R]: the value of the state before each response token (0 outside the response mask)."""
        with torch.set_grad_enabled(grad):
            out = self.model(
                input_ids=micro.input_ids.to(self.device),
                attention_mask=micro.attention_mask.to(self.device),
                position_ids=micro.position_ids.to(self.device),
            )
            start = micro.prompt_width - 1
            values = out.logits[:, start : start + micro.response_width, 0].float()
            return values * micro.response_mask.to(self.device)

    def step(self, micros: list[TrainBatch], totals: dict[str, int]) -> tuple[list[torch.Tensor], dict[str, float]]:
        """The critic's part of one train step over the batch's micro-batches: the per-token GAE advantages
        of each micro-batch (for the policy), after the critic's `ppo_epochs` optimizer steps; and its metrics."""
        self.model.eval()
        old = [self.values(m) for m in micros]
        rewards = [m.rewards.to(self.device) for m in micros]
        masks = [m.response_mask.to(self.device) for m in micros]
        width = max(m.response_width for m in micros)
        penalty = None  # the reward's KL penalty per token (algorithm.kl_penalty_fn): the trainer sets all or none
        if micros[0].token_penalty is not None:
            penalty = stack_padded([m.token_penalty.to(self.device) for m in micros], width)  # type: ignore[union-attr]
        advantages, returns = algorithms.gae(
            torch.cat(rewards), stack_padded(old, width), stack_padded(masks, width), self.gae_args, penalty
        )  # whitened over the whole batch

        self.model.train()
        epochs = self.settings.ppo_epochs
        loss_sum, clipped, norms = 0.0, 0.0, []
        lr = self.scheduler.get_last_lr()[0]
        for _ in range(epochs):  # each a step on the whole batch; from the second on the clip can bind
            self.optimizer.zero_grad(set_to_none=True)
            row = 0
            for micro, old_values, mask in zip(micros, old, masks, strict=True):
                rows, r = micro.input_ids.shape[0], micro.response_width
                loss, clipfrac = algorithms.value_loss(
                    self.values(micro, grad=True), old_values, returns[row : row + rows, :r], mask,
                    self.settings.cliprange_value, **totals,
                )
                loss.backward()
                loss_sum += loss.item() / epochs
                clipped += clipfrac * float(mask.sum()) / epochs
                row += rows
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.grad_clip)
            norms.append(float(grad_norm))
            if torch.isfinite(grad_norm):
                self.optimizer.step()
        self.scheduler.step()  # the schedule moves once per train step, as the policy's

        all_mask = stack_padded(masks, width)
        tokens = float(all_mask.sum())
        metrics = {
            "critic/value_loss": loss_sum,
            "critic/vf_clipfrac": clipped / tokens if tokens else 0.0,
            **value_metrics(returns, stack_padded(old, width), all_mask),
            "critic/grad_norm": sum(norms) / len(norms),
            "critic/lr": float(lr),
        }
        splits, row = [], 0
        for micro in micros:
            rows = micro.input_ids.shape[0]
            splits.append(advantages[row : row + rows, : micro.response_width].detach())
            row += rows
        return splits, metrics

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        weights = {n: p.detach().cpu().contiguous() for n, p in self.model.named_parameters()}
        save_file(weights, str(folder / WEIGHTS))
        torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()},
                   folder / OPTIM_STATE)

    def load(self, folder: Path) -> None:
        if not (folder / WEIGHTS).is_file():
            raise FileNotFoundError(f"{folder}: no critic in this checkpoint ({WEIGHTS}); it was written by a run "
                                    "without advantage_fn 'ppo'")
        weights = load_file(str(folder / WEIGHTS))
        params = dict(self.model.named_parameters())
        unknown = set(weights) - set(params)
        if unknown:
            raise ValueError(f"{folder / WEIGHTS} has parameters this critic lacks: {sorted(unknown)[:5]}")
        with torch.no_grad():
            for name, tensor in weights.items():
                params[name].copy_(tensor.to(params[name].dtype))
        state: Any = load_tensors(folder / OPTIM_STATE)  # weights_only: nothing of the file runs
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

