"""Our losses as Tinker computes them (backends/tinker/losses.py), checked without a server: Tinker's
built-in losses (their formulas, summed over datums and tokens as the hosted service does) on the
datums we build give exactly what algorithms.compute_loss gives the torch trainer, for every
loss_agg_mode; and the learning-rate schedule is the torch trainer's."""

from __future__ import annotations

import math
import typing
from typing import Any

import pytest
import torch

import algorithms
from backends.tinker import losses
from backends.tinker.trainer import scheduled_lr
from buffer.experience import Experience
from deployments import load_recipe


def batch(seed: int = 0) -> list[Experience]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, (prompt, response, adv) in enumerate([(3, 4, 1.0), (5, 2, -0.5), (2, 6, 0.25), (4, 1, -1.5)]):
        out.append(Experience(
            eid=f"e{i}", task_id="t", group_id="g", prompt_token_ids=list(range(1, prompt + 1)),
            response_token_ids=list(range(10, 10 + response)),
            logprobs=(-torch.rand(response, generator=gen) * 2).tolist(), reward=0.0, advantage=adv,
            response_mask=[1] * (response - 1) + [0] if response > 2 else [],
        ))
    return out


def new_logprobs(exps: list[Experience], seed: int = 1) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.tensor(e.logprobs) + 0.3 * torch.randn(len(e.logprobs), generator=gen) for e in exps]


def tinker_builtin(name: str, config: dict[str, float] | None, inputs: dict[str, list[float]], current: torch.Tensor) -> torch.Tensor:
    """The built-in loss of one datum's response part, as Tinker's loss_fns compute it (summed)."""
    if name == "cross_entropy":
        return -(torch.tensor(inputs["weights"]) * current).sum()
    ratio = torch.exp(current - torch.tensor(inputs["logprobs"]))
    adv = torch.tensor(inputs["advantages"])
    if name == "importance_sampling":
        return -(ratio * adv).sum()
    clipped = torch.clamp(ratio, config["clip_low_threshold"], config["clip_high_threshold"])
    if name == "ppo":
        return -torch.minimum(ratio * adv, clipped * adv).sum()
    return -(clipped.detach() * current * adv).sum()  # cispo


def ours(algorithm: Any, exps: list[Experience], current: list[torch.Tensor]) -> float:
    width = max(len(e.response_token_ids) for e in exps)
    def pad(values: list[float]) -> list[float]:
        return values + [0.0] * (width - len(values))
    mask = torch.tensor([pad(losses.response_mask(e)) for e in exps])
    loss, _ = algorithms.compute_loss(algorithm, algorithms.LossInputs(
        logprobs=torch.stack([torch.nn.functional.pad(c, (0, width - len(c))) for c in current]),
        old_logprobs=torch.tensor([pad(e.logprobs) for e in exps]),
        advantages=torch.tensor([pad([e.advantage] * len(e.response_token_ids)) for e in exps]),
        response_mask=mask, global_num_tokens=int(mask.sum()), global_num_seqs=int((mask.sum(-1) > 0).sum()),
    ))
    return float(loss)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("algorithm_type", ["grpo", "cispo", "opmd", "sft", "importance_sampling"])
def test_builtin_losses_equal_ours(algorithm_type: str, mode: str) -> None:
    overrides: dict[str, Any] = {"algorithm.algorithm_type": algorithm_type, "model.tinker.enable": True}
    if algorithm_type in ("importance_sampling", "sft"):  # a policy loss of its own, on RL experiences
        overrides.update({"algorithm.algorithm_type": "grpo", "algorithm.policy_loss_fn": algorithm_type})
    config = load_recipe("hello").with_overrides(overrides)
    algorithm = config.algorithm.model_copy(update={"policy_loss_fn_args": {**config.algorithm.policy_loss_fn_args, "loss_agg_mode": mode}})
    if algorithm_type == "grpo":  # ratios inside the clip range, where Tinker's ppo (no dual clip) is ours
        algorithm.policy_loss_fn_args.update(clip_range_low=0.9, clip_range_high=2.0, clip_range=0.9)
    plan = losses.plan(algorithm)
    assert not plan.custom, plan
    exps = batch()
    current = new_logprobs(exps)
    total = sum(tinker_builtin(plan.tinker_loss, plan.config, inputs, c)
                for inputs, c in zip(losses.step_inputs(plan, algorithm, exps), current, strict=True))
    assert math.isclose(float(total), ours(algorithm, exps, current), rel_tol=1e-5, abs_tol=1e-7)


def test_ppo_clip_settings_become_tinker_thresholds() -> None:
    config = load_recipe("gsm8k-tinker").with_overrides({"algorithm.policy_loss_fn_args": {"clip_range_low": 0.2, "clip_range_high": 0.28}})
    plan = losses.plan(config.algorithm)
    assert (plan.tinker_loss, plan.config) == ("ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28})
    assert losses.plan(config.algorithm, "custom").custom
    gspo = load_recipe("gsm8k-tinker").with_overrides({"algorithm.algorithm_type": "gspo"})
    assert losses.plan(gspo.algorithm).custom  # no built-in: forward_backward_custom with our loss


def test_custom_loss_is_compute_loss_and_ignores_padding() -> None:
    config = load_recipe("gsm8k-tinker").with_overrides({"algorithm.algorithm_type": "gspo"})
    exps = batch()
    current = [c.clone().requires_grad_(True) for c in new_logprobs(exps)]
    # what forward_backward_custom hands the loss: logprobs of every target position, padding datums last
    full = [torch.cat([torch.zeros(len(e.prompt_token_ids) - 1), c]) for e, c in zip(exps, current, strict=True)]
    pad = torch.zeros(5, requires_grad=True)
    captured: dict[str, float] = {}
    loss, _ = losses.custom_loss(config.algorithm, exps, captured)(None, [*full, pad])  # type: ignore[arg-type]
    assert math.isclose(loss.item(), ours(config.algorithm, exps, [c.detach() for c in current]), rel_tol=1e-6)
    loss.backward()
    assert pad.grad is not None and float(pad.grad.abs().sum()) == 0.0 and captured["loss"] == pytest.approx(float(loss))


@pytest.mark.parametrize("optimizer_settings", [
    {"lr_scheduler_type": "constant", "lr_warmup_steps": 3},
    {"lr_scheduler_type": "cosine", "lr_warmup_steps": 3},
    {"lr_scheduler_type": "cosine", "lr_warmup_steps": 2, "min_lr_ratio": 0.1},  # decays to lr × 0.1, not 0
    {"lr_scheduler_type": "cosine", "lr_warmup_steps_ratio": 0.25, "min_lr_ratio": 0.5},
], ids=["constant", "cosine", "cosine-min-lr", "cosine-warmup-ratio"])
def test_lr_schedule_is_the_torch_trainers(optimizer_settings: dict[str, Any]) -> None:
    """Tinker steps with the learning rate the torch trainer's own scheduler gives each step."""
    from backends.torch_trainer import lr_scheduler

    config = load_recipe("hello").with_overrides({f"algorithm.optimizer.{k}": v for k, v in optimizer_settings.items()})
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([param], lr=config.algorithm.optimizer.lr)
    torch_scheduler = lr_scheduler(optimizer, config.algorithm.optimizer, 10)
    lrs = []
    for step in range(1, 11):
        lrs.append(scheduled_lr(config, step, 10))
        assert lrs[-1] == pytest.approx(torch_scheduler.get_last_lr()[0]), step
        optimizer.step()
        torch_scheduler.step()
    floor = config.algorithm.optimizer.lr * config.algorithm.optimizer.min_lr_ratio
    if optimizer_settings.get("min_lr_ratio"):  # the cosine decays towards the floor, not to 0
        to_zero = config.with_overrides({"algorithm.optimizer.min_lr_ratio": 0.0})
        assert min(lrs[3:]) > floor and scheduled_lr(to_zero, 10, 10) < lrs[-1]


def test_tinker_refuses_an_optimizer_it_does_not_have() -> None:
    from backends.tinker.trainer import ADAM_OPTIMIZERS
    from schemas import OptimizerConfig

    assert set(typing.get_args(OptimizerConfig.model_fields["optimizer_type"].annotation)) == ADAM_OPTIMIZERS
