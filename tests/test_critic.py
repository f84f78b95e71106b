"""PPO's critic (advantage_fn 'ppo'): GAE and the clipped value loss against hand-computed numbers, the
settings it is validated with, and the torch trainer's critic on the tiny model of tests/tiny_model.py (a step, and a
checkpoint a fresh trainer resumes from exactly). The whole flow: tests/test_critic_run.py (slow)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

import algorithms
from backends.critic import OPTIM_STATE, WEIGHTS, critic_dir
from backends.torch_trainer import TorchTrainer
from buffer.experience import Experience
from checkpointing.safe_load import UnsafeCheckpointError
from deployments import load_recipe
from schemas import ExperimentConfig, describe_errors
from tasks.explore import fill_advantages


# ----------------------------------------------------------------------------- GAE, by hand
def test_gae_matches_a_hand_computed_example() -> None:
    """Two responses (3 and 2 tokens, the second padded), γ 0.9, λ 0.8: δ_t = r_t + γV_{t+1} − V_t and
    A_t = δ_t + γλA_{t+1}, with the reward on the last response token; returns A + V; then the advantages
    are whitened over the 5 response tokens (mean 0, unbiased variance 1)."""
    rewards = torch.tensor([1.0, -1.0])
    values = torch.tensor([[0.5, 0.2, 0.4], [0.1, 0.3, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    advantages, returns = algorithms.gae(rewards, values, mask, {"gamma": 0.9, "lam": 0.8})
    # row 0: A2 = 1 − 0.4 = 0.6; A1 = 0.9·0.4 − 0.2 + 0.72·0.6 = 0.592; A0 = 0.9·0.2 − 0.5 + 0.72·0.592 = 0.10624
    # row 1: A1 = −1 − 0.3 = −1.3; A0 = 0.9·0.3 − 0.1 + 0.72·(−1.3) = −0.766
    raw = torch.tensor([0.10624, 0.592, 0.6, -0.766, -1.3])
    assert torch.allclose(returns[mask.bool()], raw + torch.tensor([0.5, 0.2, 0.4, 0.1, 0.3]), atol=1e-6)
    assert torch.allclose(advantages[mask.bool()], (raw - raw.mean()) / raw.std(), atol=1e-5)


def test_gae_with_lambda_one_and_no_discount_is_the_return_minus_the_value() -> None:
    """γ = λ = 1 (Trinity's defaults): A_t = R − V_t before whitening, so returns are the reward everywhere."""
    values = torch.tensor([[0.3, -0.2, 0.7, 0.1]])
    _, returns = algorithms.gae(torch.tensor([2.0]), values, torch.ones(1, 4), {"gamma": 1.0, "lam": 1.0})
    assert torch.allclose(returns, torch.full((1, 4), 2.0))


# ----------------------------------------------------------------------------- the value loss, by hand
def test_value_loss_takes_the_larger_of_the_clipped_and_unclipped_errors() -> None:
    """Token 0 moved from its old value 0 to 1 (the return): clipped to 0.2, its error is 0.64, and the clip
    holds its gradient at 0. Token 1 moved to 0.1, inside the clip: error 0.81. ½ · token-mean = 0.3625."""
    values = torch.tensor([[1.0, 0.1]], requires_grad=True)
    loss, clipfrac = algorithms.value_loss(values, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2),
                                           cliprange_value=0.2)
    assert loss.item() == pytest.approx(0.3625) and clipfrac == pytest.approx(0.5)
    loss.backward()
    # d/dv of ½ · mean over 2 tokens of (v − 1)²: (v − 1)/2 for the unclipped token
    assert values.grad[0].tolist() == pytest.approx([0.0, -0.45])


def test_explained_variance() -> None:
    returns, mask = torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.ones(1, 4)
    assert algorithms.explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert algorithms.explained_variance(returns, torch.zeros(1, 4), mask) == pytest.approx(0.0, abs=1e-4)


# ----------------------------------------------------------------------------- settings
def ppo_config(**overrides: object) -> ExperimentConfig:
    return load_recipe("smoke").with_overrides({"algorithm": {"algorithm_type": "ppo", "repeat_times": 2}, **overrides})


def test_the_ppo_preset_trains_a_critic_on_the_torch_trainer() -> None:
    config = ppo_config()
    assert config.algorithm.advantage_fn == "ppo" and config.algorithm.advantage_fn_args == {"gamma": 1.0, "lam": 1.0}
    assert config.model.critic_model_path == config.model.model_path  # derived: the critic starts from the policy
    assert "model.critic_model_path" in config.derived and not config.warnings
    critic = config.trainer.critic
    assert (critic.optim.lr, critic.cliprange_value, critic.grad_clip) == (1e-5, 0.5, 1.0)  # veRL's defaults


@pytest.mark.parametrize(("overrides", "field"), [
    ({"trainer.critic.cliprange_value": 0}, "trainer.critic.cliprange_value"),
    ({"trainer.critic.optim.lr": -1}, "trainer.critic.optim.lr"),
    ({"trainer.critic": {"optim": {"warmup": 3}}}, "trainer.critic.optim.warmup"),  # not a setting
    ({"algorithm.advantage_fn_args": {"lam": 1.5}}, "algorithm.advantage_fn_args.lam"),
])
def test_a_wrong_critic_setting_is_an_error_naming_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        ppo_config(**overrides)
    assert any(line.startswith(f"{field}:") for line in describe_errors(exc.value)), describe_errors(exc.value)


def test_tinker_refuses_the_critic_naming_algorithm_type() -> None:
    with pytest.raises(ValidationError) as exc:
        ppo_config(**{"trainer": {"trainer_type": "tinker"}, "explorer.rollout_model.engine_type": "tinker"})
    lines = [line for line in describe_errors(exc.value) if line.startswith("algorithm.algorithm_type:")]
    assert lines and "trainer_type 'tinker' cannot train" in lines[0] and "no value model" in lines[0], \
        describe_errors(exc.value)


def test_the_ppo_preset_validates_on_verl_with_its_critic_settings() -> None:
    config = ppo_config(**{"trainer": {"trainer_type": "verl", "critic": {"optim": {"lr": 2e-5}, "critic_warmup": 2}}})
    assert config.trainer.critic.optim.lr == 2e-5 and config.trainer.critic.critic_warmup == 2 and not config.warnings


def test_gae_named_under_another_preset_is_refused_naming_advantage_fn() -> None:
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({"algorithm.advantage_fn": "ppo", "trainer": {"trainer_type": "tinker"},
                                             "explorer.rollout_model.engine_type": "tinker"})
    assert any(line.startswith("algorithm.advantage_fn: 'ppo' needs a critic") for line in describe_errors(exc.value))


def test_critic_settings_without_a_critic_are_warned() -> None:
    config = load_recipe("smoke").with_overrides({"trainer.critic.cliprange_value": 0.2,
                                                  "model.critic_model_path": "HuggingFaceTB/SmolLM2-135M-Instruct"})
    assert {w.split(":")[0] for w in config.warnings} >= {"trainer.critic", "model.critic_model_path"}, config.warnings


# ----------------------------------------------------------------------------- the torch trainer's critic
def scored(step: int) -> list[Experience]:
    out = []
    for i in range(4):
        response = [504 + i, 314, 216, 34 + step, 2][: 2 + (i + step) % 4]
        out.append(Experience(eid=f"s{step}/{i}", task_id=f"t{i // 2}", group_id=f"s{step}g{i // 2}",
                              prompt_token_ids=[1, 9690, 198, 2683, 314, 216, 33 + i // 2], response_token_ids=response,
                              logprobs=[-1.5] * len(response), reward=float(i % 2) + 0.25 * step))
    return out


@pytest.fixture(scope="module")
def model_dir(tiny_model_path: str) -> Path:
    return Path(tiny_model_path)


def test_a_resumed_critic_continues_exactly(model_dir: Path, tmp_path: Path) -> None:
    config = ppo_config(**{"trainer.micro_batch_size": 2, "trainer.critic.optim.lr": 1e-4})
    first, second = scored(1), scored(2)
    fill_advantages(config, first)
    assert all(e.advantage is None for e in first)  # GAE: the trainer makes the advantages
    straight = TorchTrainer(config, model_dir, total_steps=4)
    metrics = straight.train_step(first)
    for key in ("critic/value_loss", "critic/vf_explained_var", "critic/values_mean"):
        assert torch.isfinite(torch.tensor(metrics[key])), (key, metrics)
    assert metrics["critic/value_loss"] > 0 and metrics["grad_norm"] > 0
    actor = tmp_path / "global_step_1" / "actor"
    straight.save_checkpoint(actor)
    assert (critic_dir(actor) / WEIGHTS).is_file() and (critic_dir(actor) / OPTIM_STATE).is_file()
    after = straight.train_step(second)

    resumed = TorchTrainer(config, model_dir, total_steps=4)
    resumed.load_checkpoint(actor)
    again = resumed.train_step(second)
    assert again["critic/value_loss"] == after["critic/value_loss"] and again["loss"] == after["loss"]
    for a, b in ((straight.critic.model, resumed.critic.model), (straight.model, resumed.model)):
        theirs = dict(b.named_parameters())
        assert all(torch.equal(p, theirs[n]) for n, p in a.named_parameters())


def test_a_planted_pickle_in_the_critic_state_is_refused(model_dir: Path, tmp_path: Path) -> None:
    config = ppo_config()
    trainer = TorchTrainer(config, model_dir, total_steps=2)
    actor = tmp_path / "global_step_1" / "actor"
    trainer.save_checkpoint(actor)
    marker = tmp_path / "ran"
    torch.save({"optimizer": _Payload(marker)}, critic_dir(actor) / OPTIM_STATE)
    with pytest.raises(UnsafeCheckpointError, match=OPTIM_STATE):
        TorchTrainer(config, model_dir, total_steps=2).load_checkpoint(actor)
    assert not marker.exists()


class _Payload:
    """Unpickling this would run `touch marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return os.system, (f"touch {self.marker}",)


def test_critic_warmup_holds_the_policy_and_epochs_let_the_value_clip_bind(model_dir: Path) -> None:
    """critic_warmup 1: the first step trains the critic only (the policy's weights and schedule stay); ppo_epochs 3:
    the critic takes three steps on the batch, and from the second its values have moved, so the clip binds."""
    config = ppo_config(**{"trainer.micro_batch_size": 2, "trainer.critic.optim.lr": 1e-3, "trainer.critic.cliprange_value": 1e-4,
                           "trainer.critic.critic_warmup": 1, "trainer.critic.ppo_epochs": 3})
    trainer = TorchTrainer(config, model_dir, total_steps=4)
    policy = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    critic = {n: p.detach().clone() for n, p in trainer.critic.model.named_parameters()}
    first = trainer.train_step(scored(1))
    assert first["critic/warmup"] == 1.0 and first["critic/vf_clipfrac"] > 0, first
    assert all(torch.equal(p, policy[n]) for n, p in trainer.model.named_parameters())  # the policy waited
    assert any(not torch.equal(p, critic[n]) for n, p in trainer.critic.model.named_parameters())
    second = trainer.train_step(scored(2))
    assert "critic/warmup" not in second and second["grad_norm"] > 0
    assert any(not torch.equal(p, policy[n]) for n, p in trainer.model.named_parameters())  # now it learns


def test_the_critics_head_is_seeded_by_the_trainers_seed(model_dir: Path) -> None:
    """The value head is new and random: trainer.seed makes two runs of one config start alike, whatever ran
    before in the process (CI found the warm-up test above depending on the process's history)."""
    def head(seed: int, history: int) -> torch.Tensor:
        torch.manual_seed(history)  # what ran before in this process
        trainer = TorchTrainer(ppo_config(**{"trainer.seed": seed}), model_dir, total_steps=1)
        return trainer.critic.model.score.weight.detach().clone()

    first = head(7, history=1)
    assert torch.equal(first, head(7, history=2))
    assert not torch.equal(first, head(8, history=1))


def test_trinity_critic_warmup_and_epochs_are_read_into_the_torch_critic() -> None:
    from schemas.trinity.aliases import apply_aliases

    data = apply_aliases({"trainer": {"trainer_type": "torch", "trainer_config": {
        "trainer": {"critic_warmup": 5}, "critic": {"ppo_epochs": 2, "optim": {"lr": 2e-5}}}}})
    assert data["trainer"]["critic"] == {"critic_warmup": 5, "ppo_epochs": 2, "optim": {"lr": 2e-5}}
    assert "trainer_config" not in data["trainer"]


def test_trinity_critic_settings_are_read_into_the_verl_critic_and_the_rest_stays_in_its_tree() -> None:
    from schemas.trinity.aliases import apply_aliases

    data = apply_aliases({"trainer": {"trainer_type": "verl", "trainer_config": {
        "trainer": {"critic_warmup": 3}, "critic": {"cliprange_value": 0.2, "forward_micro_batch_size_per_gpu": 4}}}})
    assert data["trainer"]["critic"] == {"critic_warmup": 3, "cliprange_value": 0.2}
    assert data["trainer"]["trainer_config"]["critic"] == {"forward_micro_batch_size_per_gpu": 4}  # veRL merges it


def test_gae_adds_the_reward_kl_penalty_to_each_tokens_reward() -> None:
    """With KL in the reward, every response token's reward gets −kl_coef·KL_t (veRL's PPO): with γ = λ = 1 and no
    values, each return is the score plus the penalties from that token on."""
    penalty = torch.tensor([[-0.1, -0.2, -0.3], [-0.5, -0.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    _, returns = algorithms.gae(torch.tensor([1.0, 2.0]), torch.zeros(2, 3), mask, {"gamma": 1.0, "lam": 1.0}, penalty)
    assert torch.allclose(returns * mask, torch.tensor([[0.4, 0.5, 0.7], [1.0, 1.5, 0.0]]), atol=1e-6)


def test_a_kl_penalty_in_the_reward_reaches_the_critics_returns(model_dir: Path) -> None:
    """kl_penalty_fn with the ppo preset: the reference scores the batch, the penalty goes into GAE's per-token
    rewards (the critic's returns fall below the scores by it), and the controller's metrics are reported."""
    config = ppo_config(**{"trainer.micro_batch_size": 2, "algorithm.kl_penalty_fn": "k1",
                           "algorithm.kl_penalty_fn_args": {"kl_coef": 0.5}})
    batch = scored(1)
    for e in batch:  # rollout log-probs far from the reference's: a large KL
        e.logprobs = [-0.01] * len(e.response_token_ids)
    metrics = TorchTrainer(config, model_dir, total_steps=2).train_step(batch)
    assert metrics["kl_penalty"] > 1.0 and metrics["kl_penalty_coef"] == 0.5, metrics
    assert metrics["reward_after_kl"] < metrics["reward_before_kl"] - 0.5
    assert metrics["critic/returns_mean"] < sum(e.reward for e in batch) / len(batch) - 0.5, metrics
