"""algorithms/: every advantage fn, policy loss, aggregation mode, KL and entropy term against values
worked out by hand in the test (small tensors, expected numbers written out)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import algorithms
from algorithms import LossInputs, compute_advantages, compute_loss, needs_entropy, needs_reference_model

EPS = 1e-6  # GRPO's default epsilon in the std denominator


def make_algorithm(*, namespace: bool = False, **overrides: Any) -> Any:
    """The real ``schemas.AlgorithmConfig`` when it is importable, else a namespace with its attribute names.
    ``namespace=True`` forces the namespace: for configs the schema would reject before they reach us."""
    fields: dict[str, Any] = {
        "algorithm_type": "grpo",
        "repeat_times": 4,
        "policy_loss_fn": "ppo",
        "policy_loss_fn_args": {"clip_range": 0.2, "clip_ratio_c": 3.0, "loss_agg_mode": "token-mean"},
        "advantage_fn": "grpo",
        "advantage_fn_args": {"epsilon": EPS, "norm_adv_by_std_in_grpo": True},
        "kl_penalty_fn": "none",
        "kl_loss_fn": "none",
        "kl_loss_fn_args": {"kl_coef": 0.0},
        "entropy_loss_fn": "none",
        "entropy_loss_fn_args": {"entropy_coef": 0.0},
    }
    fields.update(overrides)
    if not namespace:
        try:
            from schemas import AlgorithmConfig
        except ImportError:
            pass
        else:
            return AlgorithmConfig(**fields)
    return SimpleNamespace(**fields)


def ones(b: int, t: int) -> torch.Tensor:
    return torch.ones(b, t)


def approx(values: list[float] | float, abs_tol: float = 1e-5):
    return pytest.approx(values, abs=abs_tol)


def loss_inputs(log_ratios: list[list[float]], advantages: list[list[float]], mask=None, **kw) -> LossInputs:
    """Inputs whose old logprobs are fixed and whose current logprobs differ by ``log_ratios``."""
    old = torch.full((len(log_ratios), len(log_ratios[0])), -1.0)
    logprobs = (old + torch.tensor(log_ratios)).requires_grad_(True)
    mask = torch.ones_like(old) if mask is None else torch.tensor(mask, dtype=torch.float32)
    return LossInputs(logprobs=logprobs, old_logprobs=old, advantages=torch.tensor(advantages),
                      response_mask=mask, **kw)


# ---------------------------------------------------------------- advantages


def test_grpo_one_group_scaled_by_std() -> None:
    # rewards 1,0,0,1: mean 0.5, sample std sqrt(((0.5^2) * 4) / 3) = sqrt(1/3)
    expected = 0.5 / (math.sqrt(1 / 3) + EPS)  # = 0.86602...
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    adv = compute_advantages(make_algorithm(), torch.tensor([1.0, 0.0, 0.0, 1.0]), ["g"] * 4, mask)
    assert adv.shape == (4, 3)
    assert adv.tolist() == [
        approx([expected, expected, 0.0]),
        approx([-expected, -expected, -expected]),
        approx([-expected, 0.0, 0.0]),
        approx([expected, expected, expected]),
    ]


def test_grpo_without_std_scaling_is_mean_centred() -> None:
    algo = make_algorithm(advantage_fn_args={"epsilon": EPS, "norm_adv_by_std_in_grpo": False})
    adv = compute_advantages(algo, torch.tensor([1.0, 0.0, 0.0, 1.0]), ["g"] * 4, ones(4, 2))
    assert adv[:, 0].tolist() == approx([0.5, -0.5, -0.5, 0.5])


def test_grpo_groups_are_independent() -> None:
    # group a: 2, 0 -> mean 1, std sqrt(2) ; group b: 3, 3, 3 -> std 0 -> all zero
    adv = compute_advantages(make_algorithm(), torch.tensor([2.0, 3.0, 0.0, 3.0, 3.0]),
                             ["a", "b", "a", "b", "b"], ones(5, 1))
    a = 1 / (math.sqrt(2) + EPS)
    assert adv[:, 0].tolist() == approx([a, 0.0, -a, 0.0, 0.0])


def test_grpo_std_threshold_zeroes_near_constant_groups() -> None:
    # group a: 0.1, 0.2 (std 0.0707 <= 0.2 -> zeroed); group b: 1, 0 (std 0.707, kept)
    algo = make_algorithm(advantage_fn_args={"epsilon": EPS, "norm_adv_by_std_in_grpo": True, "std_threshold": 0.2})
    adv = compute_advantages(algo, torch.tensor([0.1, 0.2, 1.0, 0.0]), ["a", "a", "b", "b"], ones(4, 1))
    b = 0.5 / (math.sqrt(0.5) + EPS)
    assert adv[:, 0].tolist() == approx([0.0, 0.0, b, -b])


def test_rloo_leave_one_out_baseline() -> None:
    # r_i - mean(others): 1 - 1/3 = 2/3 ; 0 - 2/3 = -2/3
    adv = compute_advantages(make_algorithm(advantage_fn="rloo"), torch.tensor([1.0, 0.0, 0.0, 1.0]), ["g"] * 4,
                             ones(4, 2))
    assert adv.tolist() == [approx([2 / 3] * 2), approx([-2 / 3] * 2), approx([-2 / 3] * 2), approx([2 / 3] * 2)]


def test_reinforce_plus_plus_discounted_returns_whitened_over_batch() -> None:
    # reward on the last token, gamma 0.5: returns row0 = [0.5, 1.0], row1 = [0, 0]
    # batch mean 0.375; unbiased var = (0.125^2 + 0.625^2 + 2 * 0.375^2) / 3
    algo = make_algorithm(advantage_fn="reinforceplusplus", advantage_fn_args={"gamma": 0.5})
    adv = compute_advantages(algo, torch.tensor([1.0, 0.0]), ["a", "b"], ones(2, 2))
    std = math.sqrt((0.125**2 + 0.625**2 + 2 * 0.375**2) / 3)
    assert adv.tolist() == [approx([0.125 / std, 0.625 / std]), approx([-0.375 / std, -0.375 / std])]


def test_opmd_mean_baseline() -> None:
    algo = make_algorithm(advantage_fn="opmd", advantage_fn_args={"opmd_baseline": "mean", "tau": 1.0})
    adv = compute_advantages(algo, torch.tensor([1.0, 0.0, 0.0, 1.0]), ["g"] * 4, ones(4, 1))
    assert adv[:, 0].tolist() == approx([0.5, -0.5, -0.5, 0.5])


def test_opmd_logavgexp_baseline_and_singleton_group() -> None:
    # group g: baseline tau*log((e^(1/tau) + e^0) / 2) with tau=1 = log((e + 1) / 2) = 0.62011...
    # group s has one member: baseline 0, advantage = reward
    algo = make_algorithm(advantage_fn="opmd", advantage_fn_args={"opmd_baseline": "logavgexp", "tau": 1.0})
    adv = compute_advantages(algo, torch.tensor([1.0, 0.0, 0.7]), ["g", "g", "s"], ones(3, 1))
    base = math.log((math.e + 1) / 2)
    assert adv[:, 0].tolist() == approx([1 - base, -base, 0.7])


def test_advantage_args_missing_keys_fall_back_to_defaults() -> None:
    adv = compute_advantages(make_algorithm(advantage_fn_args={}), torch.tensor([1.0, 0.0]), ["g", "g"], ones(2, 1))
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert adv[:, 0].tolist() == approx([a, -a])


# ---------------------------------------------------------------- PPO clip


PPO_RATIOS = [1.5, 0.5, 1.1, 0.7, 4.0, 9.0]
PPO_ADV = [1.0, 1.0, -1.0, -1.0, -1.0, 1.0]
PPO_MASK = [1, 1, 1, 1, 1, 0]  # the last token (wild ratio) is not trained on


def ppo_inputs() -> LossInputs:
    return loss_inputs([[math.log(r) for r in PPO_RATIOS]], [PPO_ADV], mask=[PPO_MASK])


def test_ppo_clip_asymmetric_ranges_and_dual_clip() -> None:
    # clip to [1 - 0.2, 1 + 0.3]; dual clip c = 3 for negative advantages. Per token -A * ratio terms:
    #   r=1.5, A=+1: max(-1.5, -1.3) = -1.3   (upper clip)
    #   r=0.5, A=+1: max(-0.5, -0.8) = -0.5   (unclipped)
    #   r=1.1, A=-1: max(1.1, 1.1)   = 1.1    (unclipped)
    #   r=0.7, A=-1: max(0.7, 0.8)   = 0.8    (lower clip)
    #   r=4.0, A=-1: max(4.0, 1.3) = 4.0 -> min(4.0, 3 * 1) = 3.0 (dual clip)
    algo = make_algorithm(policy_loss_fn_args={"clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.3,
                                               "clip_ratio_c": 3.0, "loss_agg_mode": "token-mean"})
    inputs = ppo_inputs()
    loss, metrics = compute_loss(algo, inputs)
    assert loss.item() == approx((-1.3 - 0.5 + 1.1 + 0.8 + 3.0) / 5)
    assert metrics["pg_loss"] == approx(0.62)
    assert metrics["loss"] == approx(0.62)
    assert metrics["pg_clipfrac"] == approx(2 / 5)  # tokens 0 and 3
    assert metrics["pg_clipfrac_lower"] == approx(1 / 5)  # token 4
    assert metrics["ppo_kl"] == approx(-sum(math.log(r) for r in PPO_RATIOS[:5]) / 5)
    assert "kl_loss" not in metrics and "entropy" not in metrics

    # Gradient flows only through unclipped tokens: d/dlogp (-A * ratio) / 5 = -A * ratio / 5.
    loss.backward()
    assert inputs.logprobs.grad[0].tolist() == approx([0.0, -0.5 / 5, 1.1 / 5, 0.0, 0.0, 0.0])


def test_ppo_symmetric_clip_from_clip_range_only() -> None:
    # clip_range 0.1 -> [0.9, 1.1]; r = 1.5 with A = +1 is clipped to 1.1, r = 0.5 with A = -1 to 0.9
    algo = make_algorithm(policy_loss_fn_args={"clip_range": 0.1})
    loss, metrics = compute_loss(algo, loss_inputs([[math.log(1.5), math.log(0.5)]], [[1.0, -1.0]]))
    assert loss.item() == approx((-1.1 + 0.9) / 2)
    assert metrics["pg_clipfrac"] == approx(1.0)


def test_ppo_on_policy_equals_minus_mean_advantage() -> None:
    # ratio 1 everywhere: loss = -mean(A); nothing clipped; ppo_kl 0
    loss, metrics = compute_loss(make_algorithm(), loss_inputs([[0.0, 0.0], [0.0, 0.0]], [[2.0, 2.0], [-1.0, -1.0]]))
    assert loss.item() == approx(-0.5)
    assert metrics["pg_clipfrac"] == 0.0 and metrics["pg_clipfrac_lower"] == 0.0
    assert metrics["ppo_kl"] == approx(0.0)


# ---------------------------------------------------------------- aggregation modes, via SFT


# per-token NLL [[1, 2, 3], [4, 9, 9]] with mask [[1, 1, 1], [1, 0, 0]]
NLL = [[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]]
NLL_MASK = [[1, 1, 1], [1, 0, 0]]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),
        ("seq-mean-token-mean", ((1 + 2 + 3) / 3 + 4 / 1) / 2),
        ("seq-mean-token-sum", ((1 + 2 + 3) + 4) / 2),
        ("token-sum", 1 + 2 + 3 + 4),
        ("seq-mean-token-sum-norm", ((1 + 2 + 3) + 4) / 2 / 3),  # divided by T = 3
    ],
)
def test_sft_nll_each_aggregation_mode(mode: str, expected: float) -> None:
    algo = make_algorithm(algorithm_type="sft", policy_loss_fn="sft", policy_loss_fn_args={"loss_agg_mode": mode})
    logprobs = (-torch.tensor(NLL)).requires_grad_(True)
    mask = torch.tensor(NLL_MASK, dtype=torch.float32)
    inputs = LossInputs(logprobs=logprobs, old_logprobs=logprobs.detach(), advantages=torch.zeros(2, 3),
                        response_mask=mask)
    loss, metrics = compute_loss(algo, inputs)
    assert loss.item() == approx(expected)
    assert metrics["sft_loss"] == approx(expected) and metrics["loss"] == approx(expected)
    loss.backward()
    assert (logprobs.grad * (1 - mask)).abs().sum() == 0  # masked tokens get no gradient


def test_ppo_aggregation_mode_changes_the_reduction() -> None:
    # on-policy (ratio 1), per-token loss = -A: [[-1, -2], [-6, ·]] with the last token masked
    args = {"clip_range": 0.2, "loss_agg_mode": "seq-mean-token-mean"}
    inputs = loss_inputs([[0.0, 0.0], [0.0, 0.0]], [[1.0, 2.0], [6.0, 100.0]], mask=[[1, 1], [1, 0]])
    loss, _ = compute_loss(make_algorithm(policy_loss_fn_args=args), inputs)
    assert loss.item() == approx(((-1 - 2) / 2 + -6) / 2)


def test_micro_batches_with_global_counts_sum_to_the_full_batch_loss() -> None:
    algo = make_algorithm(algorithm_type="sft", policy_loss_fn="sft", policy_loss_fn_args={"loss_agg_mode": "token-mean"})
    logprobs = -torch.tensor(NLL)
    mask = torch.tensor(NLL_MASK, dtype=torch.float32)
    full, _ = compute_loss(algo, LossInputs(logprobs, logprobs, torch.zeros(2, 3), mask))
    parts = [
        compute_loss(algo, LossInputs(logprobs[i:i + 1], logprobs[i:i + 1], torch.zeros(1, 3), mask[i:i + 1],
                                      global_num_tokens=4, global_num_seqs=2))[0]
        for i in range(2)
    ]
    assert full.item() == approx(2.5)
    assert sum(p.item() for p in parts) == approx(2.5)  # 6/4 + 4/4


# ---------------------------------------------------------------- GSPO


def test_gspo_sequence_level_ratio_is_clipped() -> None:
    # log ratios [0.2, 0.0] -> sequence ratio exp(mean) = exp(0.1) = 1.105; A = +1 clipped at 1 + 0.0004
    algo = make_algorithm(policy_loss_fn="gspo", policy_loss_fn_args={})  # Trinity defaults
    loss, metrics = compute_loss(algo, loss_inputs([[0.2, 0.0]], [[1.0, 1.0]]))
    assert loss.item() == approx(-1.0004)
    assert metrics["pg_clipfrac"] == approx(1.0)
    assert metrics["ppo_kl"] == approx(-0.1)


# ---------------------------------------------------------------- KL and entropy terms


LOG_P, LOG_REF = math.log(0.5), math.log(0.25)  # current policy 0.5, reference 0.25 on every token


@pytest.mark.parametrize(
    ("kl_fn", "per_token"),
    [
        ("k1", math.log(2)),  # log p - log p_ref
        ("k2", 0.5 * math.log(2) ** 2),  # ½ (log p - log p_ref)^2
        ("k3", 0.5 + math.log(2) - 1),  # r = log p_ref - log p = -log 2 ; e^r - r - 1
        ("low_var_kl", 0.5 + math.log(2) - 1),
    ],
)
def test_kl_loss_terms(kl_fn: str, per_token: float) -> None:
    algo = make_algorithm(kl_loss_fn=kl_fn, kl_loss_fn_args={"kl_coef": 0.1})
    assert needs_reference_model(algo)
    logprobs = torch.full((2, 2), LOG_P, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # on-policy with zero advantages: the policy term is 0, the loss is kl_coef * KL
    inputs = LossInputs(logprobs=logprobs, old_logprobs=logprobs.detach(), advantages=torch.zeros(2, 2),
                        response_mask=mask, ref_logprobs=torch.full((2, 2), LOG_REF))
    loss, metrics = compute_loss(algo, inputs)
    assert metrics["kl_loss"] == approx(per_token)
    assert metrics["pg_loss"] == approx(0.0)
    assert loss.item() == approx(0.1 * per_token)


def test_kl_on_without_reference_logprobs_is_a_clear_error() -> None:
    algo = make_algorithm(kl_loss_fn="k2", kl_loss_fn_args={"kl_coef": 0.1})
    with pytest.raises(ValueError, match="ref_logprobs"):
        compute_loss(algo, loss_inputs([[0.0]], [[1.0]]))


def test_entropy_bonus_is_subtracted() -> None:
    # entropy [[0.5, 1.5]] token-mean 1.0 ; loss = pg (-mean A = -1) - 0.1 * 1.0
    algo = make_algorithm(entropy_loss_fn="default", entropy_loss_fn_args={"entropy_coef": 0.1})
    assert needs_entropy(algo)
    inputs = loss_inputs([[0.0, 0.0]], [[1.0, 1.0]], entropy=torch.tensor([[0.5, 1.5]], requires_grad=True))
    loss, metrics = compute_loss(algo, inputs)
    assert metrics["entropy"] == approx(1.0)
    assert loss.item() == approx(-1.0 - 0.1)
    loss.backward()
    assert inputs.entropy.grad.tolist() == [approx([-0.05, -0.05])]


def test_entropy_given_without_the_term_is_only_a_metric() -> None:
    algo = make_algorithm()
    assert not needs_entropy(algo)
    loss, metrics = compute_loss(algo, loss_inputs([[0.0, 0.0]], [[1.0, 1.0]], entropy=torch.tensor([[2.0, 4.0]])))
    assert metrics["entropy"] == approx(3.0)
    assert loss.item() == approx(-1.0)


def test_needs_reference_model_and_entropy_switches() -> None:
    assert not needs_reference_model(make_algorithm(kl_loss_fn="none", kl_loss_fn_args={"kl_coef": 0.1}))
    assert not needs_reference_model(make_algorithm(kl_loss_fn="k2", kl_loss_fn_args={"kl_coef": 0.0}))
    assert needs_reference_model(make_algorithm(kl_loss_fn="k2", kl_loss_fn_args={}))  # default kl_coef 0.001
    assert not needs_entropy(make_algorithm(entropy_loss_fn="default", entropy_loss_fn_args={"entropy_coef": 0.0}))
    assert needs_entropy(make_algorithm(entropy_loss_fn="basic", entropy_loss_fn_args={"entropy_coef": 0.01}))


# ---------------------------------------------------------------- errors and extension


def test_unknown_names_and_bad_settings_name_the_field() -> None:
    one = (torch.tensor([1.0]), ["g"], ones(1, 1))
    with pytest.raises(ValueError, match=r"algorithm\.advantage_fn: unknown name 'nope'"):
        compute_advantages(make_algorithm(namespace=True, advantage_fn="nope"), *one)
    with pytest.raises(ValueError, match=r"algorithm\.kl_penalty_fn: unknown estimator 'k9'"):
        needs_reference_model(make_algorithm(namespace=True, kl_penalty_fn="k9", kl_penalty_fn_args={}))
    with pytest.raises(ValueError, match=r"algorithm\.policy_loss_fn: unknown name"):
        compute_loss(make_algorithm(namespace=True, policy_loss_fn="nope"), loss_inputs([[0.0]], [[1.0]]))
    with pytest.raises(ValueError, match=r"algorithm\.kl_loss_fn: unknown name"):
        needs_reference_model(make_algorithm(namespace=True, kl_loss_fn="k9", kl_loss_fn_args={"kl_coef": 0.1}))
    with pytest.raises(ValueError, match="loss_agg_mode"):
        compute_loss(make_algorithm(namespace=True, policy_loss_fn_args={"clip_range": 0.2, "loss_agg_mode": "mean"}),
                     loss_inputs([[0.0]], [[1.0]]))
    with pytest.raises(ValueError, match="clip_ratio_c"):
        compute_loss(make_algorithm(namespace=True, policy_loss_fn_args={"clip_range": 0.2, "clip_ratio_c": 1.0}),
                     loss_inputs([[0.0]], [[1.0]]))
    with pytest.raises(ValueError, match="old_logprobs"):
        compute_loss(make_algorithm(), LossInputs(torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(2, 3),
                                                  torch.ones(2, 3)))


def test_a_new_advantage_fn_is_one_registration_with_its_arguments_model() -> None:
    from pydantic import Field

    from algorithms.registry import Args

    class ConstantArgs(Args):
        value: float = Field(2.0, description="The advantage of every token.")

    @algorithms.register_advantage_fn("test_constant", ConstantArgs)
    def constant(rewards, group_ids, response_mask, args):
        return torch.full_like(response_mask, args["value"]) * response_mask

    try:
        assert algorithms.ADVANTAGE_FNS.defaults("test_constant") == {"value": 2.0}  # the model's default
        adv = compute_advantages(make_algorithm(namespace=True, advantage_fn="test_constant", advantage_fn_args={}),
                                 torch.tensor([0.0]), ["g"], torch.tensor([[1.0, 0.0]]))
        assert adv.tolist() == [[2.0, 0.0]]
    finally:
        del algorithms.ADVANTAGE_FNS["test_constant"]
        del algorithms.ADVANTAGE_FNS.args["test_constant"]


def test_the_schema_takes_each_function_s_arguments_from_its_registration() -> None:
    """One source of argument defaults: the model a function is registered with is what the schema checks."""
    from schemas.algorithm_registry import BUILT, FUNCTION_REGISTRIES

    for kind, registry in BUILT.items():
        assert set(registry) == set(registry.args)
        for name, model in registry.args.items():
            assert FUNCTION_REGISTRIES[kind][name] is model, (kind, name)
    config = make_algorithm(policy_loss_fn="cispo", policy_loss_fn_args={"clip_range_high": 0.3})
    assert algorithms.POLICY_LOSS_FNS.resolve_args("cispo", {"clip_range_high": 0.3}) == {
        "clip_range_low": 1.0, "clip_range_high": 0.3, "loss_agg_mode": "token-mean"}
    assert config.policy_loss_fn_args == {"clip_range_high": 0.3}  # an AlgorithmConfig alone is not resolved


# ---------------------------------------------------------------- schema-listed extras


def test_advantage_none_is_zero() -> None:
    adv = compute_advantages(make_algorithm(advantage_fn="none"), torch.tensor([1.0, 0.0]), ["g", "g"], ones(2, 3))
    assert adv.tolist() == [[0.0] * 3, [0.0] * 3]


def test_ppo_sequence_masking_drops_negative_tokens_of_drifted_sequences() -> None:
    # row 0: log ratios -0.5 (mean KL(old||new) 0.5 > delta 0.1), A = [-1, +1]
    #   token 0 (A<0) is dropped; token 1: max(-e^-0.5, -0.8) = -e^-0.5
    # row 1: on-policy (KL 0), A = [-1, -1]: losses 1, 1 (kept)
    args = {"clip_range": 0.2, "enable_sequence_masking": True, "delta_sequence_masking": 0.1}
    inputs = loss_inputs([[-0.5, -0.5], [0.0, 0.0]], [[-1.0, 1.0], [-1.0, -1.0]])
    loss, metrics = compute_loss(make_algorithm(policy_loss_fn_args=args), inputs)
    assert loss.item() == approx((0.0 - math.exp(-0.5) + 1 + 1) / 4)
    assert metrics["seq_mask_fraction"] == approx(1 / 4)
    unmasked, _ = compute_loss(make_algorithm(policy_loss_fn_args={"clip_range": 0.2}), inputs)
    assert unmasked.item() == approx((0.8 - math.exp(-0.5) + 1 + 1) / 4)


def test_cispo_clipped_stop_gradient_weight_times_logprob() -> None:
    # old logprob -1; ratios 1.5 and 0.5 -> weights clip(r, 0, 1.28) = 1.28 and 0.5; A = +1
    # loss_t = -w_t * A * logp_t ; logp = -1 + log r
    algo = make_algorithm(algorithm_type="cispo", policy_loss_fn="cispo",
                          policy_loss_fn_args={"clip_range_low": 1.0, "clip_range_high": 0.28})
    inputs = loss_inputs([[math.log(1.5), math.log(0.5)]], [[1.0, 1.0]])
    loss, metrics = compute_loss(algo, inputs)
    logp = [-1 + math.log(1.5), -1 + math.log(0.5)]
    assert loss.item() == approx((-1.28 * logp[0] - 0.5 * logp[1]) / 2)
    assert metrics["pg_clipfrac"] == approx(0.5)
    loss.backward()
    assert inputs.logprobs.grad.tolist() == [approx([-1.28 / 2, -0.5 / 2])]  # the weight carries no gradient


def test_corrected_k3_weights_k3_by_clamped_ratio_to_old_policy() -> None:
    # p = 0.5, p_ref = 0.25, p_old = 0.4: ratio 1.25 ; k3 = 0.5 + log 2 - 1
    algo = make_algorithm(kl_loss_fn="corrected_k3", kl_loss_fn_args={"kl_coef": 1.0})
    logprobs = torch.full((1, 2), LOG_P, requires_grad=True)
    inputs = LossInputs(logprobs=logprobs, old_logprobs=torch.full((1, 2), math.log(0.4)),
                        advantages=torch.zeros(1, 2), response_mask=ones(1, 2),
                        ref_logprobs=torch.full((1, 2), LOG_REF))
    _, metrics = compute_loss(algo, inputs)
    assert metrics["kl_loss"] == approx(1.25 * (0.5 + math.log(2) - 1))


def test_adaptive_kl_and_unset_function_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"kl_loss_fn_args\.adaptive"):
        needs_reference_model(make_algorithm(kl_loss_fn="k2", kl_loss_fn_args={"kl_coef": 0.1, "adaptive": True}))
    with pytest.raises(ValueError, match=r"algorithm\.policy_loss_fn is not set"):
        compute_loss(make_algorithm(namespace=True, policy_loss_fn=None), loss_inputs([[0.0]], [[1.0]]))


# ---------------------------------------------------------------- OPMD


def test_opmd_loss_is_minus_advantage_times_logprob_over_one_plus_tau() -> None:
    # logprobs [[-1.2, -0.8], [-1.0, ·]] (the last masked), advantages [[0.5, 0.5], [-1, -1]], tau 1:
    # token-mean of -A * logp = (0.6 + 0.4 - 1.0) / 3 = 0; with tau 1 the loss is that / 2
    algo = make_algorithm(policy_loss_fn="opmd", policy_loss_fn_args={"tau": 1.0, "loss_agg_mode": "token-mean"})
    inputs = loss_inputs([[-0.2, 0.2], [0.0, 5.0]], [[0.5, 0.5], [-1.0, -1.0]], mask=[[1, 1], [1, 0]])
    loss, metrics = compute_loss(algo, inputs)
    assert loss.item() == approx(((0.5 * 1.2) + (0.5 * 0.8) - 1.0) / 3 / 2)
    assert metrics["opmd_loss"] == approx(loss.item()) and metrics["pg_loss"] == approx(loss.item())
    loss.backward()  # d/dlogp = -A / 3 / (1 + tau); masked tokens none; no importance ratio involved
    assert inputs.logprobs.grad.flatten().tolist() == approx([-0.5 / 6, -0.5 / 6, 1 / 6, 0.0])
    tau3, _ = compute_loss(make_algorithm(policy_loss_fn="opmd", policy_loss_fn_args={"tau": 3.0}),
                           loss_inputs([[0.0]], [[2.0]]))
    assert tau3.item() == approx(-2.0 * -1.0 / 4)


# ---------------------------------------------------------------- Trinity-RFT's other functions (issue 26)


def test_asymre_shifted_group_baseline_and_its_verl_name() -> None:
    # group g: mean 0.5, baseline_shift -0.1 -> baseline 0.4; group s (one member): baseline 0
    for name in ("asymre", "asymre_verl"):
        algo = make_algorithm(advantage_fn=name, advantage_fn_args={"baseline_shift": -0.1})
        adv = compute_advantages(algo, torch.tensor([1.0, 0.0, 0.0, 1.0, 0.7]), ["g"] * 4 + ["s"], ones(5, 1))
        assert adv[:, 0].tolist() == approx([0.6, -0.4, -0.4, 0.6, 0.7]), name


def test_reinforce_advantage_is_the_reward() -> None:
    adv = compute_advantages(make_algorithm(advantage_fn="reinforce", advantage_fn_args={}),
                             torch.tensor([1.0, 0.0, 0.3]), ["g", "g", "h"], ones(3, 2))
    assert adv.tolist() == [approx([1.0, 1.0]), approx([0.0, 0.0]), approx([0.3, 0.3])]


def test_rec_advantage_mean_std_and_balanced_drop() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    plain = compute_advantages(make_algorithm(advantage_fn="rec", advantage_fn_args={}), rewards, ["g"] * 4, ones(4, 1))
    assert plain[:, 0].tolist() == approx([0.75, -0.25, -0.25, -0.25])
    std = math.sqrt(0.1875)  # population std of [1, 0, 0, 0]
    normed = compute_advantages(make_algorithm(advantage_fn="rec", advantage_fn_args={"std_normalize": True}),
                                rewards, ["g"] * 4, ones(4, 1))
    assert normed[:, 0].tolist() == approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], abs_tol=1e-4)
    # balance: 3 below the mean, 1 above -> 2 of the zeros dropped; the kept [1, 0] have mean 0.5
    dropped = compute_advantages(make_algorithm(advantage_fn="rec", advantage_fn_args={"drop": "balance"}),
                                 rewards, ["g"] * 4, ones(4, 1))
    assert dropped[0, 0].item() == approx(0.5) and sorted(dropped[1:, 0].tolist()) == approx([-0.5, 0.0, 0.0])


def test_step_wise_grpo_group_and_batch_std_and_threshold() -> None:
    rewards, groups = torch.tensor([1.0, 0.0, 1.0, 1.0]), ["a", "a", "b", "b"]
    algo = make_algorithm(advantage_fn="step_wise_grpo", advantage_fn_args={})
    adv = compute_advantages(algo, rewards, groups, ones(4, 1))[:, 0].tolist()
    s = math.sqrt(0.5)  # unbiased std of [1, 0]; group b has std 0: advantages 0
    assert adv == approx([0.5 / (s + 1e-6), -0.5 / (s + 1e-6), 0.0, 0.0])
    batch = compute_advantages(make_algorithm(advantage_fn="step_wise_grpo", advantage_fn_args={"std_cal_level": "batch"}),
                               rewards, groups, ones(4, 1))[:, 0].tolist()
    assert batch[:2] == approx([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)])  # std of the whole batch: 0.5
    kept = compute_advantages(make_algorithm(advantage_fn="step_wise_grpo", advantage_fn_args={"std_threshold": 0.8}),
                              rewards, groups, ones(4, 1))
    assert kept.abs().sum().item() == 0.0  # both groups at or below the threshold


def test_grpo_verl_and_opmd_verl_are_their_group_estimators() -> None:
    rewards, groups = torch.tensor([1.0, 0.0, 0.5, 0.5]), ["g", "g", "h", "h"]
    for verl_name, name in (("grpo_verl", "grpo"), ("opmd_verl", "opmd")):
        a = compute_advantages(make_algorithm(advantage_fn=verl_name, advantage_fn_args={}), rewards, groups, ones(4, 1))
        b = compute_advantages(make_algorithm(advantage_fn=name, advantage_fn_args={}), rewards, groups, ones(4, 1))
        assert torch.equal(a, b), verl_name


def test_topr_tapers_negative_samples_by_the_clipped_ratio() -> None:
    # logp = -1 + [0.5, -0.5]; A = [1, -1]: token 1 alpha 1, token 2 alpha = min(e^-0.5, 1)
    algo = make_algorithm(policy_loss_fn="topr", policy_loss_fn_args={})
    inputs = loss_inputs([[0.5, -0.5]], [[1.0, -1.0]])
    loss, metrics = compute_loss(algo, inputs)
    alpha = math.exp(-0.5)
    assert loss.item() == approx((-1 * -0.5 + alpha * -1.5) / 2)
    assert metrics["avg_alpha"] == approx((1 + alpha) / 2)
    loss.backward()  # alpha is stop-gradient: d/dlogp = -alpha * A / 2
    assert inputs.logprobs.grad.tolist() == [approx([-0.5, alpha / 2])]


def test_sppo_masks_tokens_outside_the_trust_region() -> None:
    # epsilon 0.3: ratio e^0.5 = 1.65 > 1.3 is masked; e^-0.1 = 0.905 >= 1/1.3 is kept: -A * log ratio = 0.1
    loss, metrics = compute_loss(make_algorithm(policy_loss_fn="sppo", policy_loss_fn_args={}),
                                 loss_inputs([[0.5, -0.1]], [[1.0, 1.0]]))
    assert loss.item() == approx(0.1 / 2) and metrics["pg_clipfrac"] == approx(0.5)


def test_sapo_soft_gate_gives_the_policy_gradient_on_policy() -> None:
    # on policy (r = 1) the gate is 4σ(0)/τ = 2/τ and its slope 1: loss -(A · 2/τ), gradient -A per token
    inputs = loss_inputs([[0.0, 0.0]], [[1.0, -1.0]])
    loss, metrics = compute_loss(make_algorithm(policy_loss_fn="sapo", policy_loss_fn_args={}), inputs)
    assert loss.item() == approx((-2.0 + 2.0 / 1.05) / 2)
    loss.backward()
    assert inputs.logprobs.grad.tolist() == [approx([-0.5, 0.5])]
    from algorithms.policy_loss.sapo import SAPOArgs

    with pytest.raises(ValueError, match="tau_neg"):
        SAPOArgs(tau_pos=1.0, tau_neg=0.5)


def test_rec_two_side_clip_and_k2_regulariser() -> None:
    # ratio e^0.5 outside [0.8, 1.2] -> no policy term; token 2 on policy: -A * logp = 1
    algo = make_algorithm(policy_loss_fn="rec", policy_loss_fn_args={"clip_mode": "two-side"})
    loss, metrics = compute_loss(algo, loss_inputs([[0.5, 0.0]], [[1.0, 1.0]]))
    assert loss.item() == approx(1.0 / 2) and metrics["pg_clipfrac"] == approx(0.5)
    algo = make_algorithm(policy_loss_fn="rec", policy_loss_fn_args={"clip_mode": "two-side", "regularizer": "k2",
                                                                     "regularizer_coef": 1.0})
    loss, _ = compute_loss(algo, loss_inputs([[0.5, 0.0]], [[1.0, 1.0]]))
    assert loss.item() == approx((0.25 + 1.0) / 2)


def test_rec_ring_keeps_tokens_far_outside_the_band_on_the_side_their_advantage_points_to() -> None:
    # ratio e^-1 ≈ 0.37 with A > 0 and e^1.2 ≈ 3.3 with A < 0: outside two-side's [0.8, 1.2], inside ring's outer band
    # (r ≤ 1 − ε'_low = 0.4, r ≥ 1 + ε'_high = 3.0) until either edge moves past them
    inputs = ([[-1.0, 1.2]], [[1.0, -1.0]])
    clipped = {}
    for name, args in {"two-side": {"clip_mode": "two-side"}, "ring": {"clip_mode": "ring"},
                       "low edge 0.3": {"clip_mode": "ring", "epsilon_low_prime": 0.7},
                       "high edge 3.5": {"clip_mode": "ring", "epsilon_high_prime": 2.5}}.items():
        _, metrics = compute_loss(make_algorithm(policy_loss_fn="rec", policy_loss_fn_args=args), loss_inputs(*inputs))
        clipped[name] = metrics["pg_clipfrac"]
    assert clipped == {"two-side": 1.0, "ring": 0.0, "low edge 0.3": 0.5, "high edge 3.5": 0.5}


def test_sft_is_and_sft_phi_weight_the_nll() -> None:
    # logp = -0.5 and -1.5: sft_is weights by p, sft_phi by p(1-p)
    p = [math.exp(-0.5), math.exp(-1.5)]
    loss, _ = compute_loss(make_algorithm(policy_loss_fn="sft_is", policy_loss_fn_args={}),
                           loss_inputs([[0.5, -0.5]], [[0.0, 0.0]]))
    assert loss.item() == approx((0.5 * p[0] + 1.5 * p[1]) / 2)
    loss, _ = compute_loss(make_algorithm(policy_loss_fn="sft_phi", policy_loss_fn_args={}),
                           loss_inputs([[0.5, -0.5]], [[0.0, 0.0]]))
    assert loss.item() == approx((0.5 * p[0] * (1 - p[0]) + 1.5 * p[1] * (1 - p[1])) / 2)


# ---------------------------------------------------------------- what a loss declares


def _zero_advantage_inputs(name: str) -> tuple[LossInputs, list[torch.Tensor]]:
    """Random [4, 3] inputs with every advantage 0 (and whatever else loss `name` reads), and its leaves."""
    torch.manual_seed(0)
    logprobs = (-torch.rand(4, 3) * 2 - 0.1).requires_grad_(True)
    k = max(algorithms.teacher_topk(name, None), 1)
    student = (-torch.rand(4, 3, k) * 2 - 0.1).requires_grad_(True)
    inputs = LossInputs(
        logprobs=logprobs, old_logprobs=logprobs.detach() + 0.3 * torch.randn(4, 3), advantages=torch.zeros(4, 3),
        response_mask=torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]),
        ref_logprobs=logprobs.detach() - 0.2, expert_mask=torch.zeros(4, dtype=torch.bool), step=1,
        teacher_topk_logprobs=-torch.rand(4, 3, k) * 2, student_topk_logprobs=student,
    )
    return inputs, [logprobs, student]


@pytest.mark.parametrize("name", sorted(algorithms.POLICY_LOSS_FNS))
def test_a_loss_declares_exactly_when_a_zero_advantage_sample_adds_nothing(name: str) -> None:
    # The torch trainer skips zero-advantage samples on what the loss declares (trainer.skip_zero_advantage): a loss
    # that is zero there but does not say so only costs time; one that says so but is not would change the update.
    inputs, leaves = _zero_advantage_inputs(name)
    loss, _ = algorithms.POLICY_LOSS_FNS[name](inputs, algorithms.POLICY_LOSS_FNS.resolve_args(name, None))
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    adds_nothing = loss.item() == 0.0 and all(g is None or not g.any() for g in grads)
    assert algorithms.zero_at_zero_advantage(name, None) == adds_nothing


def test_rec_with_a_regulariser_trains_zero_advantage_samples() -> None:
    args = {"regularizer": "k2", "regularizer_coef": 0.1}
    inputs, leaves = _zero_advantage_inputs("rec")
    loss, _ = algorithms.POLICY_LOSS_FNS["rec"](inputs, algorithms.POLICY_LOSS_FNS.resolve_args("rec", args))
    assert torch.autograd.grad(loss, leaves[0])[0].any()
    assert not algorithms.zero_at_zero_advantage("rec", args)
    assert algorithms.zero_at_zero_advantage("rec", {**args, "regularizer_coef": 0.0})
