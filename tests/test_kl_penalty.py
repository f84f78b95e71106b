"""algorithms/kl_penalty.py: the KL penalty in the reward (every estimator Trinity names, against values
worked out by hand), the adaptive coefficient's controller, and the advantages made from the penalised
rewards (backends/reward_kl.py, which the torch and veRL trainers call)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from algorithms import KLController, apply_kl_penalty, kl_controller, needs_reference_model
from algorithms.kl_penalty import penalized_rewards
from backends.reward_kl import RewardKL
from buffer.experience import Experience
from schemas import AlgorithmConfig

# One response of two tokens: log p = [-1, -2], log p_ref = [-1.5, -1]; d = log p - log p_ref = [0.5, -1].
LOGP = torch.tensor([[-1.0, -2.0]])
REF = torch.tensor([[-1.5, -1.0]])
MASK = torch.ones(1, 2)


def _k3(d: float) -> float:  # exp(-d) - 1 + d, with r = log p_ref - log p = -d
    return math.exp(-d) - 1 + d


# Trinity's estimators (trinity/algorithm/kl_fn/kl_fn.py), per token, summed over the response.
EXPECTED_SUM = {
    "k1": 0.5 + -1.0,
    "k2": 0.5 * 0.25 + 0.5 * 1.0,
    "k3": _k3(0.5) + _k3(-1.0),
    "low_var_kl": _k3(0.5) + _k3(-1.0),
    "abs": 0.5 + 1.0,
    "corrected_k3": _k3(0.5) + _k3(-1.0),  # no old policy in a reward: the importance ratio is 1, as in Trinity
}


def algorithm(**overrides) -> AlgorithmConfig:
    fields = {"algorithm_type": "grpo", "repeat_times": 2, "advantage_fn": "grpo",
              "advantage_fn_args": {"epsilon": 1e-6, "norm_adv_by_std_in_grpo": True}, "kl_penalty_fn": "k1",
              "kl_penalty_fn_args": {"kl_coef": 0.1}, "kl_loss_fn": "none", "kl_loss_fn_args": {"kl_coef": 0.0}}
    return AlgorithmConfig(**(fields | overrides))


@pytest.mark.parametrize("name", sorted(EXPECTED_SUM))
def test_each_trinity_estimator_subtracts_coef_times_the_summed_token_kl(name: str) -> None:
    shaped, mean_kl = penalized_rewards(name, 0.1, torch.tensor([1.0]), LOGP, REF, MASK)
    assert float(shaped[0]) == pytest.approx(1.0 - 0.1 * EXPECTED_SUM[name], abs=1e-6)
    assert mean_kl == pytest.approx(EXPECTED_SUM[name] / 2, abs=1e-6)  # per-token mean


def test_masked_tokens_add_no_kl() -> None:
    mask = torch.tensor([[1.0, 0.0]])
    shaped, mean_kl = penalized_rewards("abs", 1.0, torch.tensor([1.0]), LOGP, REF, mask)
    assert float(shaped[0]) == pytest.approx(0.5) and mean_kl == pytest.approx(0.5)


def test_fixed_coefficient_stays_and_adaptive_follows_trinitys_controller() -> None:
    fixed = KLController(0.1)
    fixed.update(current_kl=10.0, batch_size=8)
    assert fixed.kl_coef == 0.1
    up = KLController(0.1, adaptive=True, target_kl=0.01, horizon=100)
    up.update(current_kl=0.02, batch_size=10)  # error 1.0 clipped to 0.2: × (1 + 0.2 × 10 / 100)
    assert up.kl_coef == pytest.approx(0.1 * 1.02)
    down = KLController(0.1, adaptive=True, target_kl=0.01, horizon=100)
    down.update(current_kl=0.009, batch_size=10)  # error -0.1: × (1 - 0.1 × 0.1)
    assert down.kl_coef == pytest.approx(0.1 * 0.99)
    with pytest.raises(ValueError, match="target_kl and horizon"):
        KLController(0.1, adaptive=True, target_kl=0.01)


def test_the_controller_state_round_trips_as_plain_numbers() -> None:
    a = KLController(0.1, adaptive=True, target_kl=0.01, horizon=100)
    for kl in (0.05, 0.03, 0.001):
        a.update(kl, 16)
    state = a.state_dict()
    assert state == {"kl_coef": pytest.approx(a.kl_coef)} and all(type(v) is float for v in state.values())
    b = KLController(0.1, adaptive=True, target_kl=0.01, horizon=100)
    b.load_state_dict(state)
    a.update(0.02, 16), b.update(0.02, 16)
    assert b.kl_coef == a.kl_coef


def test_off_or_zero_coefficient_needs_no_reference() -> None:
    assert kl_controller(algorithm(kl_penalty_fn="none", kl_penalty_fn_args={"kl_coef": 0.0})) is None
    assert kl_controller(algorithm(kl_penalty_fn_args={"kl_coef": 0.0})) is None
    assert not needs_reference_model(algorithm(kl_penalty_fn_args={"kl_coef": 0.0}))
    assert needs_reference_model(algorithm())
    ctl = kl_controller(algorithm(kl_penalty_fn_args={"kl_coef": 0.2, "adaptive": True, "target_kl": 0.1, "horizon": 50}))
    assert (ctl.kl_coef, ctl.adaptive, ctl.target_kl, ctl.horizon) == (0.2, True, 0.1, 50)


def test_penalised_rewards_change_the_group_advantages() -> None:
    # Two responses of one group with the same score: GRPO gives both 0; the one further from the
    # reference is penalised more and gets the negative advantage.
    logp = torch.tensor([[-1.0, -1.0], [-1.0, -1.0]])
    ref = torch.tensor([[-1.0, -1.0], [-3.0, -3.0]])  # k1: 0 and 2 per token
    alg = algorithm()
    ctl = kl_controller(alg)
    adv, metrics = apply_kl_penalty(alg, ctl, torch.tensor([1.0, 1.0]), ["g", "g"], logp, ref, torch.ones(2, 2))
    assert float(adv[0]) > 0 > float(adv[1])
    assert metrics["kl_penalty"] == pytest.approx(1.0)  # mean of per-token means 0 and 2
    assert metrics["kl_penalty_coef"] == 0.1
    assert metrics["reward_before_kl"] == pytest.approx(1.0)
    assert metrics["reward_after_kl"] == pytest.approx(1.0 - 0.1 * 4 / 2)


def test_the_trainer_side_remakes_advantages_of_a_batch_of_experiences() -> None:
    def exp(i: int, reward: float) -> Experience:
        return Experience(eid=f"e{i}", task_id="t", group_id="g", prompt_token_ids=[1, 2], response_token_ids=[3, 4],
                          logprobs=[-1.0, -1.0], reward=reward, advantage=0.0)

    batch = [exp(0, 1.0), exp(1, 1.0)]
    reward_kl = RewardKL.for_algorithm(algorithm(kl_penalty_fn="k2"))
    out, metrics = reward_kl.apply(batch, lambda b: [[-1.0, -1.0], [-2.0, -2.0]])
    assert [e.eid for e in out] == ["e0", "e1"] and [e.reward for e in out] == [1.0, 1.0]  # rewards as scored
    assert out[0].advantage > 0 > out[1].advantage
    assert metrics["reward_after_kl"] < metrics["reward_before_kl"]
    assert RewardKL.for_algorithm(SimpleNamespace(kl_penalty_fn="none")) is None


def test_tinker_takes_both_kl_forms_but_refuses_another_reference_model() -> None:
    """The reference on Tinker is a sampling client of the stage's starting weights; a KL term in the loss runs
    our loss through forward_backward_custom (no built-in loss has one)."""
    from pydantic import ValidationError

    from deployments import load_recipe
    from schemas.trainer import TinkerTrainerConfig

    tinker = load_recipe("gsm8k-tinker")
    penalised = tinker.with_overrides({"algorithm.kl_penalty_fn": "k3", "algorithm.kl_penalty_fn_args": {"kl_coef": 0.01}})
    assert penalised.algorithm.kl_penalty_fn == "k3"
    assert TinkerTrainerConfig.builtin_loss(penalised.algorithm) == "ppo"  # the reward's KL leaves the loss built-in
    term = tinker.with_overrides({"algorithm.kl_loss_fn": "k3", "algorithm.kl_loss_fn_args": {"kl_coef": 0.01}})
    assert term.algorithm.kl_loss_fn == "k3" and TinkerTrainerConfig.builtin_loss(term.algorithm) is None
    with pytest.raises(ValidationError, match=r"model\.ref_model_path"):
        tinker.with_overrides({"model.ref_model_path": "HuggingFaceTB/SmolLM2-135M-Instruct"})
