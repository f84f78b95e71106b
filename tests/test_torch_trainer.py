"""The native torch trainer on the tiny model (tests/tiny_model.py: SmolLM2-135M's tokenizer, 2 small layers): exact
skipping, checkpoints, exported weights. What is checked is exact arithmetic, not learning, so the size does not matter."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from backends.batch import collate, micro_batches
from backends.torch_trainer import TorchTrainer
from buffer.experience import Experience
from deployments import load_recipe
from schemas import ExperimentConfig
from tasks.sft import dataset_key, supervised_examples


@pytest.fixture(scope="module")
def model_dir(tiny_model_path: str) -> Path:
    return Path(tiny_model_path)


def make_config(**overrides: object) -> ExperimentConfig:
    return load_recipe("smoke").with_overrides({"algorithm.optimizer.lr": 1e-4, "trainer.micro_batch_size": 2, **overrides})


def batch(advantages: list[float], step: int = 1) -> list[Experience]:
    out = []
    for i, adv in enumerate(advantages):
        prompt = [1, 9690, 198, 2683, 314, 216, 33 + i]
        response = [504 + i, 314, 216, 34 + i, 2][: 3 + i % 3]
        out.append(
            Experience(
                eid=f"s{step}/{i}", task_id=f"t{i // 2}", group_id=f"g{i // 2}",
                prompt_token_ids=prompt, response_token_ids=response,
                logprobs=[-1.0] * len(response), reward=adv, advantage=adv,
            )
        )
    return out


def weights(trainer: TorchTrainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


# Each preset's loss declares it adds nothing at A = 0 (algorithms/policy_loss/base.py, AdvantageScaledArgs).
@pytest.mark.parametrize(("algorithm_type", "loss"), [("grpo", "ppo"), ("topr", "topr"), ("opmd", "opmd"),
                                                       ("sapo", "sapo"), ("sppo", "sppo"), ("rec", "rec")])
def test_skipping_zero_advantage_samples_gives_the_same_update(model_dir: Path, algorithm_type: str, loss: str) -> None:
    data = batch([1.0, -1.0, 0.0, 0.0])
    chosen = {"algorithm.algorithm_type": algorithm_type, "algorithm.kl_loss_fn": "none"}
    skipping = TorchTrainer(make_config(**chosen), model_dir, total_steps=4)
    dense = TorchTrainer(make_config(**chosen, **{"trainer.skip_zero_advantage": False}), model_dir, total_steps=4)
    assert skipping.algorithm.policy_loss_fn == loss
    m_skip, m_dense = skipping.train_step(data), dense.train_step(data)
    assert m_skip["skipped_zero_advantage"] == 2 and m_dense["skipped_zero_advantage"] == 0
    assert m_skip["pg_loss"] == pytest.approx(m_dense["pg_loss"], abs=1e-6)
    a, b = weights(skipping), weights(dense)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    assert any(not torch.equal(a[k], v) for k, v in load_file(str(model_dir / "model.safetensors")).items() if k in a)


@pytest.mark.parametrize("term", [{"algorithm.kl_loss_fn": "low_var_kl", "algorithm.kl_loss_fn_args": {"kl_coef": 0.1}},
                                  {"algorithm.entropy_loss_fn": "default",
                                   "algorithm.entropy_loss_fn_args": {"entropy_coef": 0.01}}])
def test_a_kl_or_entropy_term_trains_zero_advantage_samples(model_dir: Path, term: dict) -> None:
    # the term gives a zero-advantage sample a loss of its own, so nothing is skipped
    trainer = TorchTrainer(make_config(**term), model_dir, total_steps=4)
    assert not trainer.skips_zero_advantage
    assert trainer.train_step(batch([1.0, -1.0, 0.0, 0.0]))["skipped_zero_advantage"] == 0


def test_checkpoint_resumes_exactly(model_dir: Path, tmp_path: Path) -> None:
    first, second = batch([1.0, -1.0, 0.5, -0.5], 1), batch([-1.0, 1.0, 0.25, -0.25], 2)
    straight = TorchTrainer(make_config(), model_dir, total_steps=4)
    straight.train_step(first)
    straight.save_checkpoint(tmp_path / "ckpt")
    straight.train_step(second)

    resumed = TorchTrainer(make_config(), model_dir, total_steps=4)
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert resumed.global_step == 1
    resumed.train_step(second)
    a, b = weights(straight), weights(resumed)
    assert max((a[k] - b[k]).abs().max().item() for k in a) == 0.0
    assert straight.scheduler.get_last_lr() == resumed.scheduler.get_last_lr()


def test_exported_weights_load_in_transformers_with_the_same_logits(model_dir: Path, tmp_path: Path) -> None:
    trainer = TorchTrainer(make_config(), model_dir, total_steps=4)
    trainer.train_step(batch([1.0, -1.0]))
    out = tmp_path / "hf"
    out.mkdir()
    for name in ("config.json", "generation_config.json"):
        (out / name).write_bytes((model_dir / name).read_bytes())
    trainer.export_weights(out)
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = torch.tensor([[1, 9690, 198, 2683, 314, 216, 33, 504]])
    trainer.model.eval()
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, trainer.model(ids).logits, atol=1e-5)


def group(advantages: list[float]) -> list[Experience]:
    """One GRPO group: every sample answers the same prompt, with responses of different lengths."""
    prompt = [1, 9690, 198, 2683, 314, 216, 33, 1029, 4775, 28]
    responses = [[504, 314, 216, 34, 2], [504, 11], [77, 314, 216, 34, 2, 5, 6], [9]]
    return [
        Experience(
            eid=f"g/{i}", task_id="t", group_id="g", prompt_token_ids=prompt, response_token_ids=responses[i % 4],
            logprobs=[-1.0] * len(responses[i % 4]), reward=adv, advantage=adv,
        )
        for i, adv in enumerate(advantages)
    ]


def test_shared_prompt_pass_gives_the_padded_batch_logprobs_and_update(model_dir: Path) -> None:
    data = group([1.0, -1.0, 0.5, -0.5])
    overrides = {"trainer.micro_batch_size": 4, "trainer.skip_zero_advantage": False}
    shared = TorchTrainer(make_config(**overrides), model_dir, total_steps=4)
    padded = TorchTrainer(make_config(**overrides, **{"trainer.share_prompt": False}), model_dir, total_steps=4)
    micro = collate(data, shared.pad_token_id)
    assert micro.shared_prompt is not None and shared.share_prompt and not padded.share_prompt
    with torch.no_grad():
        a, _ = shared._response_logprobs(shared.model, micro, with_entropy=False)
        b, _ = padded._response_logprobs(padded.model, micro, with_entropy=False)
    mask = micro.response_mask.bool()
    assert torch.allclose(a[mask], b[mask], atol=1e-4), (a[mask] - b[mask]).abs().max()
    m_shared, m_padded = shared.train_step(data), padded.train_step(data)
    assert m_shared["pg_loss"] == pytest.approx(m_padded["pg_loss"], abs=1e-5)
    assert m_shared["grad_norm"] == pytest.approx(m_padded["grad_norm"], rel=1e-3)
    assert m_shared["train_tokens"] < m_padded["train_tokens"]  # the prompt counted once
    # The gradients themselves (Adam's first step turns each element into about ±lr, float noise too).
    ga = {n: p.grad for n, p in shared.model.named_parameters()}
    gb = {n: p.grad for n, p in padded.model.named_parameters()}
    scale = max(g.abs().max().item() for g in gb.values())
    assert max((ga[n] - gb[n]).abs().max().item() for n in ga) < 1e-4 * scale


def test_sft_rows_share_their_system_prompt_with_the_same_update(model_dir: Path) -> None:
    """The arith warm-up's rows differ in their question only: run once, the system prompt's tokens give the same
    loss and gradient as padded rows, for about half the tokens."""
    warm_up = load_recipe("arith").resolve_stages()[0].with_overrides({"trainer.micro_batch_size": 4})
    rows = list(supervised_examples(*dataset_key(warm_up, str(model_dir))))[:8]
    shared = TorchTrainer(warm_up, model_dir, total_steps=4)
    padded = TorchTrainer(warm_up.with_overrides({"trainer.share_prompt": False}), model_dir, total_steps=4)
    micro = collate(rows[:4], shared.pad_token_id, share_opening=True)
    opening = len(micro.shared_prompt)
    assert 30 <= opening < micro.prompt_width and collate(rows[:4], 0).shared_prompt is None
    for i, row in enumerate(rows[:4]):  # the opening, then the prompt's own tail, then the response
        real = micro.input_ids[i][micro.attention_mask[i].bool()].tolist()
        assert real == row.prompt_token_ids + row.response_token_ids
    with torch.no_grad():
        a, _ = shared._response_logprobs(shared.model, micro, with_entropy=False)
        b, _ = padded._response_logprobs(padded.model, collate(rows[:4], 0), with_entropy=False)
    mask = micro.response_mask.bool()
    assert torch.allclose(a[mask], b[mask], atol=1e-4), (a[mask] - b[mask]).abs().max()
    m_shared, m_padded = shared.train_step(rows), padded.train_step(rows)
    assert m_shared["sft_loss"] == pytest.approx(m_padded["sft_loss"], rel=1e-4)
    assert m_shared["grad_norm"] == pytest.approx(m_padded["grad_norm"], rel=1e-3)
    assert m_shared["train_tokens"] < 0.75 * m_padded["train_tokens"]
    ga = {n: p.grad for n, p in shared.model.named_parameters()}
    gb = {n: p.grad for n, p in padded.model.named_parameters()}
    scale = max(g.abs().max().item() for g in gb.values())
    assert max((ga[n] - gb[n]).abs().max().item() for n in ga) < 1e-4 * scale
    # prompts that open alike for fewer than MIN_SHARED_OPENING tokens keep the plain layout
    two = collate(group([1.0, -1.0]) + batch([1.0, -1.0]), 0, share_opening=True)
    assert two.shared_prompt is None  # 6 common tokens: too few to pay for the extra call


def test_micro_batches_keep_a_prompt_s_samples_together() -> None:
    mixed = batch([1.0, -1.0, 1.0, -1.0]) + group([1.0, -1.0, 0.5, -0.5])
    chunks = micro_batches(mixed[::-1], 4)
    assert [len(c) for c in chunks] == [4, 4]
    assert sum(collate(c, 0).shared_prompt is not None for c in chunks) == 1  # the group; the others differ


def test_micro_batches_by_prompt_never_mix_two_groups() -> None:
    """With share_prompt a group gets micro-batches of its own (one prompt run each); single rows pack together."""
    second = [replace(e, eid=f"h/{i}", prompt_token_ids=[*e.prompt_token_ids, 5]) for i, e in enumerate(group([1.0] * 6))]
    mixed = group([1.0, -1.0, 0.5, -0.5, 1.0, -1.0]) + second + batch([1.0, -1.0, 1.0])
    chunks = micro_batches(mixed[::-1], 8, by_prompt=True)
    assert sorted(len(c) for c in chunks) == [3, 6, 6]
    assert sum(collate(c, 0).shared_prompt is not None for c in chunks) == 2  # each group's prompt runs once
    assert sorted(e.eid for c in chunks for e in c) == sorted(e.eid for e in mixed)
    assert [len(c) for c in micro_batches(group([1.0] * 4), 3, by_prompt=True)] == [3, 1]  # a group over the size


def test_entropy_metric_is_the_batch_entropy_whatever_the_micro_batches(model_dir: Path) -> None:
    """compute_loss normalises the entropy by the whole batch's tokens: micro-batches add up to it (it was
    divided by their number)."""
    data = batch([1.0, -1.0, 0.5, -0.5])
    whole = TorchTrainer(make_config(**{"trainer.micro_batch_size": 4}), model_dir, total_steps=4)
    micro = collate(data, whole.pad_token_id)
    with torch.no_grad():
        _, entropy = whole._response_logprobs(whole.model, micro, with_entropy=False)
    expected = (entropy * micro.response_mask).sum() / micro.response_mask.sum()
    one = whole.train_step(data)["entropy"]
    four = TorchTrainer(make_config(**{"trainer.micro_batch_size": 1}), model_dir, total_steps=4).train_step(data)["entropy"]
    assert one == pytest.approx(expected.item(), rel=1e-5)
    assert four == pytest.approx(one, rel=1e-5)


def test_kl_penalty_lowers_the_reward_as_the_policy_leaves_its_start_and_its_coefficient_resumes(
    model_dir: Path, tmp_path: Path
) -> None:
    """algorithm.kl_penalty_fn on the real model: the reference is the model the trainer started from, so the
    first step's KL is 0; after a few steps away from it the penalty lowers the rewards. The adaptive
    coefficient moves, is written to trainer_state.json, and a resumed trainer goes on with it."""
    config = make_config(**{"algorithm.kl_penalty_fn": "k3", "algorithm.kl_penalty_fn_args": {
        "kl_coef": 0.05, "adaptive": True, "target_kl": 0.001, "horizon": 10}})
    trainer = TorchTrainer(config, model_dir, total_steps=8)
    assert trainer.reference is not None and trainer.reward_kl is not None
    steps = []
    for step in range(1, 5):
        data = batch([1.0, 0.0, 1.0, 0.0], step)
        # rollout logprobs as an engine serving the current weights would give them
        data = [replace(e, logprobs=lp) for e, lp in zip(data, trainer.logprobs(data), strict=True)]
        steps.append(trainer.train_step(data))
    assert steps[0]["kl_penalty"] == pytest.approx(0.0, abs=1e-5)
    assert steps[0]["reward_after_kl"] == pytest.approx(steps[0]["reward_before_kl"], abs=1e-4)
    assert steps[-1]["kl_penalty"] > 1e-4
    assert steps[-1]["reward_after_kl"] < steps[-1]["reward_before_kl"]
    coefs = [m["kl_penalty_coef"] for m in steps]
    assert coefs[0] == 0.05 and coefs[-1] != coefs[0]  # the controller moved it

    trainer.save_checkpoint(tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt" / "trainer_state.json").read_text())
    assert saved["reward_kl"] == {"kl_coef": pytest.approx(trainer.reward_kl.controller.kl_coef)}
    resumed = TorchTrainer(config, model_dir, total_steps=8)
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert resumed.reward_kl.controller.kl_coef == trainer.reward_kl.controller.kl_coef != 0.05
