"""M2PO (algorithms/policy_loss/m2po.py): the whole-batch mask against a hand-worked example, the loss on it, and a
torch-trainer step whose micro-batches share one mask (the same loss as one micro-batch of the whole batch)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import algorithms
from algorithms.policy_loss.m2po import batch_mask


def test_the_mask_drops_the_largest_trust_region_ratios_until_the_second_moment_fits() -> None:
    """Trust-region tokens: A > 0 with log r > 0, or A < 0 with log r < 0. Their (log r)² here are 0.01, 0.04, 0.25
    (mean 0.1); with threshold 0.04 the 0.25 goes (mean of the rest 0.025); the token with A > 0 and log r < 0 is not a
    candidate whatever its size, and padding is never kept."""
    log_ratio = torch.tensor([[0.1, 0.2, -0.9], [-0.5, 3.0, 0.0]])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    keep, metrics = batch_mask(log_ratio, torch.zeros(2, 3), advantages, mask, {"m2_threshold": 0.04})
    assert keep.tolist() == [[True, True, True], [False, True, False]]
    assert metrics["m2_before"] == pytest.approx(0.1) and metrics["m2_after"] == pytest.approx(0.025)
    assert metrics["masked_fraction"] == pytest.approx(1 / 5) and metrics["trust_region_fraction"] == pytest.approx(3 / 5)


def test_the_loss_is_the_masked_importance_weighted_gradient_over_every_token() -> None:
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]], requires_grad=True)
    old = torch.tensor([[-1.1, -2.0], [-0.5, -1.1]])  # log r: 0.1, 0, 0, 1.0
    advantages = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    inputs = algorithms.LossInputs(logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=torch.ones(2, 2))
    algorithm = SimpleNamespace(policy_loss_fn="m2po", policy_loss_fn_args={"m2_threshold": 0.04}, kl_loss_fn="none",
                                kl_loss_fn_args={}, entropy_loss_fn="none", entropy_loss_fn_args={})
    loss, metrics = algorithms.compute_loss(algorithm, inputs)
    # trust region: log r 0.1 and 1.0 (A > 0); mean of squares 0.505 > 0.04: the 1.0 goes; the rest: -(e^0.1 + 1 + 1) / 4
    assert loss.item() == pytest.approx(-(torch.tensor(0.1).exp().item() + 2) / 4)
    assert metrics["masked_fraction"] == pytest.approx(0.25)
    loss.backward()
    assert logprobs.grad[1, 1] == 0.0 and logprobs.grad[0, 0] != 0.0


def test_a_trainer_step_chooses_one_mask_for_all_micro_batches() -> None:
    """The torch trainer computes the mask over the whole batch before the loss: split into micro-batches of 2 or
    taken whole, the step's loss and gradient are the same (a per-micro-batch mask would differ)."""
    from backends.torch_trainer import TorchTrainer
    from buffer.experience import Experience
    from checkpointing.models import resolve_model_path
    from deployments import load_recipe

    def batch() -> list[Experience]:
        out = []
        for i, advantage in enumerate([1.0, -0.5, 0.75, -1.0]):
            response = [504 + i, 314, 216, 34 + i, 2][: 3 + i % 3]
            out.append(Experience(eid=f"m{i}", task_id=f"t{i // 2}", group_id=f"g{i // 2}",
                                  prompt_token_ids=[1, 9690, 198, 2683, 314, 216, 33 + i // 2], response_token_ids=response,
                                  logprobs=[-0.5 - 0.4 * ((i + j) % 3) for j in range(len(response))], reward=advantage,
                                  advantage=advantage))
        return out

    model_dir = resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")
    results = []
    for micro in (2, 8):
        config = load_recipe("smoke").with_overrides({
            "algorithm.policy_loss_fn": "m2po", "algorithm.policy_loss_fn_args": {"m2_threshold": 0.5},
            "algorithm.kl_loss_fn": "none", "trainer.micro_batch_size": micro})
        results.append(TorchTrainer(config, model_dir, total_steps=2).train_step(batch()))
    split, whole = results
    assert 0 < whole["masked_fraction"] < 1, whole  # some trust-region tokens went, not all
    assert split["masked_fraction"] == whole["masked_fraction"]
    assert split["loss"] == pytest.approx(whole["loss"], abs=1e-5) and split["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-3)
