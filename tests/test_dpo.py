"""DPO: the loss against values worked out by hand, the schema's rules (the pair columns, the trainers that
refuse it), preference pairs read from JSON lines and Parquet through the chat template, optimizer steps on
the real SmolLM2-135M that raise the chosen response over the rejected one, and (slow) a whole `rft` run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from algorithms import LossInputs, compute_loss
from algorithms.policy_loss.dpo import dpo
from backends.batch import micro_batches
from buffer.taskset import TasksetError
from checkpointing.models import resolve_model_path
from deployments import load_recipe
from schemas import ExperimentConfig, StorageConfig
from schemas.errors import error_items
from tasks.dpo import preference_pairs
from workflows.render import renderer_for

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SYSTEM = "Answer with the sum."
# Four preference pairs: the right sum is chosen, an off-by-one rejected.
ROWS = [{"prompt": f"What is {i} + 3?", "chosen": f"{i} + 3 = {i + 3}.", "rejected": f"{i} + 3 = {i + 4}."}
        for i in range(4)]


def write_pairs(path: Path, rows: list[dict[str, Any]] = ROWS) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def dpo_config(path: Path | str = "pairs.jsonl", **overrides: Any) -> ExperimentConfig:
    """The smoke recipe as a DPO stage on the plaintext pairs at `path` (2 pairs a step)."""
    return load_recipe("smoke").with_overrides({
        "mode": "train", "algorithm": {"algorithm_type": "dpo"}, "buffer.train_batch_size": 2,
        "buffer.explorer_input.eval_tasksets": [],
        "buffer.trainer_input.experience_buffer": {
            "name": "pairs", "path": str(path), "format": {"prompt_type": "plaintext", "system_prompt": SYSTEM}},
        **overrides,
    })


def problems(exc: pytest.ExceptionInfo) -> dict[str, str]:
    return dict(error_items(exc.value))


# ----------------------------------------------------------------------------- the loss
def loss_inputs(policy: list[list[float]], ref: list[list[float]], mask: list[list[float]] | None = None,
                **counts: int) -> tuple[LossInputs, torch.Tensor]:
    logprobs = torch.tensor(policy, requires_grad=True)
    zeros = torch.zeros_like(logprobs)
    response_mask = torch.tensor(mask) if mask is not None else torch.ones_like(zeros)
    return LossInputs(logprobs=logprobs, old_logprobs=zeros, advantages=zeros, response_mask=response_mask,
                      ref_logprobs=torch.tensor(ref), **counts), logprobs


# One pair: the chosen response's log-probability is -1 under the policy and -2 under the reference (ratio +1),
# the rejected one's -3 and -2 (ratio -1); the third token is padding (mask 0) and must not count.
POLICY = [[-0.5, -0.5, -9.0], [-1.0, -2.0, -9.0]]
REF = [[-1.0, -1.0, 0.0], [-1.0, -1.0, 0.0]]
MASK = [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]


def test_the_loss_is_the_sigmoid_dpo_loss_worked_out_by_hand() -> None:
    inputs, _ = loss_inputs(POLICY, REF, MASK)
    loss, metrics = dpo(inputs, {"beta": 0.1, "label_smoothing": 0.0})
    z = 0.1 * (1.0 - (-1.0))  # β × (chosen ratio − rejected ratio) = 0.2
    assert loss.item() == pytest.approx(math.log1p(math.exp(-z)), abs=1e-6)  # −log σ(0.2) = 0.598139
    assert metrics["dpo_loss"] == metrics["pg_loss"] == pytest.approx(0.598139, abs=1e-6)
    assert metrics["chosen_reward"] == pytest.approx(0.1) and metrics["rejected_reward"] == pytest.approx(-0.1)
    assert metrics["reward_margin"] == pytest.approx(0.2) and metrics["reward_accuracy"] == 1.0


def test_label_smoothing_mixes_in_the_flipped_label() -> None:
    inputs, _ = loss_inputs(POLICY, REF, MASK)
    loss, _ = dpo(inputs, {"beta": 0.1, "label_smoothing": 0.1})
    z = 0.2
    expected = 0.9 * math.log1p(math.exp(-z)) + 0.1 * math.log1p(math.exp(z))  # 0.618139
    assert loss.item() == pytest.approx(expected, abs=1e-6) and expected == pytest.approx(0.618139, abs=1e-6)


def test_a_gradient_step_raises_the_chosen_response_over_the_rejected_one() -> None:
    inputs, logprobs = loss_inputs(POLICY, REF, MASK)
    loss, before = dpo(inputs, {"beta": 0.1, "label_smoothing": 0.0})
    loss.backward()
    grad = logprobs.grad
    assert (grad[0, :2] < 0).all() and (grad[1, :2] > 0).all()  # descent raises chosen, lowers rejected
    assert (grad[:, 2] == 0).all()  # padding has no gradient
    stepped, _ = loss_inputs((logprobs - 10.0 * grad).tolist(), REF, MASK)
    loss_after, after = dpo(stepped, {"beta": 0.1, "label_smoothing": 0.0})
    assert after["reward_margin"] > before["reward_margin"] and loss_after.item() < loss.item()


def test_micro_batches_of_whole_pairs_add_up_to_the_batch_loss() -> None:
    policy = [[-0.5, -0.7], [-1.0, -0.2], [-2.0, -0.1], [-0.3, -0.4]]
    ref = [[-0.6, -0.6], [-0.6, -0.6], [-0.9, -0.9], [-0.9, -0.9]]
    whole, _ = dpo(loss_inputs(policy, ref)[0], {"beta": 0.5, "label_smoothing": 0.0})
    halves = [dpo(loss_inputs(policy[i:i + 2], ref[i:i + 2], global_num_seqs=4)[0], {"beta": 0.5, "label_smoothing": 0.0})[0]
              for i in (0, 2)]
    assert sum(h.item() for h in halves) == pytest.approx(whole.item(), abs=1e-6)


def test_the_presets_kl_term_is_added_as_trinity_adds_it() -> None:
    inputs, _ = loss_inputs(POLICY, REF, MASK)
    loss, metrics = compute_loss(dpo_config().algorithm, inputs)  # kl_loss_fn k2, kl_coef 0.001
    assert metrics["dpo_loss"] == pytest.approx(0.598139, abs=1e-6) and metrics["kl_loss"] > 0
    assert loss.item() == pytest.approx(metrics["dpo_loss"] + 0.001 * metrics["kl_loss"], abs=1e-6)


def test_the_loss_refuses_odd_rows_and_a_missing_reference() -> None:
    with pytest.raises(ValueError, match="pairs of rows"):
        dpo(loss_inputs(POLICY[:1], REF[:1])[0], {"beta": 0.1, "label_smoothing": 0.0})
    inputs, _ = loss_inputs(POLICY, REF)
    inputs.ref_logprobs = None
    with pytest.raises(ValueError, match="ref_logprobs"):
        dpo(inputs, {"beta": 0.1, "label_smoothing": 0.0})


def test_micro_batches_keep_each_pair_whole_and_in_order() -> None:
    pairs = [e for pair in preference_pairs_of_ids(5) for e in pair]
    for size in (1, 2, 3, 4, 8):
        chunks = micro_batches(pairs, size, pairs=True)
        assert [e.eid for chunk in chunks for e in chunk] == [e.eid for e in pairs]
        assert all(len(chunk) % 2 == 0 and len(chunk) <= max(size // 2, 1) * 2 for chunk in chunks)
    with pytest.raises(ValueError, match="even number"):
        micro_batches(pairs[:3], 2, pairs=True)


def preference_pairs_of_ids(n: int) -> list[tuple[Any, Any]]:
    from buffer.experience import Experience

    def row(i: int, side: str, response: list[int]) -> Experience:
        return Experience(eid=f"p{i}/{side}", task_id=f"p{i}", group_id=f"p{i}", prompt_token_ids=[1, 2, 3 + i],
                          response_token_ids=response, logprobs=[0.0] * len(response), reward=0.0, advantage=0.0)

    return [(row(i, "chosen", [5, 6, 7][: 1 + i % 3]), row(i, "rejected", [8, 9])) for i in range(n)]


# ----------------------------------------------------------------------------- the schema
def test_the_dpo_preset_trains_on_the_torch_trainer_with_trinitys_defaults() -> None:
    config = dpo_config()
    alg = config.algorithm
    assert (alg.policy_loss_fn, alg.advantage_fn, alg.kl_loss_fn, alg.sample_strategy) == ("dpo", "none", "k2", "default")
    assert alg.policy_loss_fn_args == {"beta": 0.1, "label_smoothing": 0.0}  # algorithms/policy_loss/dpo.py's defaults
    assert "algorithm.policy_loss_fn_args.beta" in config.derived and not config.warnings
    tuned = dpo_config(**{"algorithm.policy_loss_fn_args": {"beta": 0.5, "label_smoothing": 0.2}})
    assert tuned.algorithm.policy_loss_fn_args == {"beta": 0.5, "label_smoothing": 0.2}


@pytest.mark.parametrize(("args", "field"), [({"beta": 0}, "beta"), ({"label_smoothing": 0.5}, "label_smoothing"),
                                             ({"bta": 1}, "bta")])
def test_bad_dpo_arguments_are_named(args: dict, field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        dpo_config(**{"algorithm.policy_loss_fn_args": args})
    assert f"algorithm.policy_loss_fn_args.{field}" in problems(exc)


def test_tinker_refuses_dpo_by_name() -> None:
    with pytest.raises(ValidationError) as exc:
        dpo_config(**{"trainer.trainer_type": "tinker"})
    why = problems(exc)["algorithm.algorithm_type"]  # the preset's loss: named as the user wrote it
    assert "'dpo' needs (chosen, rejected) pairs" in why and "trainer_type 'tinker'" in why and "not wired" in why \
        and "trainer_type 'torch'" in why, why


def test_dpo_on_verl_trains_fixed_micro_batches_of_whole_pairs() -> None:
    config = dpo_config(**{"trainer": {"trainer_type": "verl"}})  # veRL's defaults: packed by length, 1 row a micro-batch
    assert not config.trainer.use_dynamic_bsz and "splits the (chosen, rejected)" in config.derived["trainer.use_dynamic_bsz"]
    assert config.trainer.micro_batch_size == 2 and "one pair a micro-batch" in config.derived["trainer.micro_batch_size"]
    assert not config.warnings, config.warnings
    with pytest.raises(ValidationError) as exc:  # asked for by name: micro-batches packed by length
        dpo_config(**{"trainer.trainer_type": "verl", "trainer.use_dynamic_bsz": True, "trainer.micro_batch_size": 3})
    found = problems(exc)
    assert "splits the (chosen, rejected) pairs" in found["trainer.use_dynamic_bsz"], found
    assert "use an even size" in found["trainer.micro_batch_size"], found


@pytest.mark.parametrize(("fmt", "field", "says"), [
    ({"chosen_key": "answer", "rejected_key": "answer"}, "rejected_key", "also format.chosen_key"),
    ({"chosen_key": "prompt"}, "chosen_key", "also format.prompt_key"),
    ({"rejected_key": ""}, "rejected_key", "required"),
    ({"prompt_type": "messages", "messages_key": "chosen"}, "chosen_key", "also format.messages_key"),
])
def test_the_pair_columns_are_checked_naming_the_field(fmt: dict, field: str, says: str) -> None:
    with pytest.raises(ValidationError) as exc:
        dpo_config(**{"buffer.trainer_input.experience_buffer.format": {"prompt_type": "plaintext", **fmt}})
    why = problems(exc)[f"buffer.trainer_input.experience_buffer.format.{field}"]
    assert says in why, why


def test_held_out_pairs_are_checked_like_the_training_pairs() -> None:
    held_out = {"path": "heldout.jsonl", "format": {"prompt_type": "plaintext", "chosen_key": "prompt"}}
    with pytest.raises(ValidationError) as exc:
        dpo_config(**{"buffer.trainer_input.eval_pairs": held_out})
    assert "also format.prompt_key" in problems(exc)["buffer.trainer_input.eval_pairs.format.chosen_key"]
    config = dpo_config(**{"buffer.trainer_input.eval_pairs": {"path": "heldout.jsonl"}})
    assert config.buffer.trainer_input.eval_pairs.name == "eval_pairs" and not config.warnings
    explore_only = load_recipe("smoke").with_overrides({"mode": "explore",
                                                        "buffer.trainer_input.eval_pairs": {"path": "heldout.jsonl"}})
    assert any(w.startswith("buffer.trainer_input.eval_pairs: ") and "only a run that trains" in w
               for w in explore_only.warnings), explore_only.warnings


def test_dpo_learns_from_a_dataset_only() -> None:
    with pytest.raises(ValidationError) as exc:
        dpo_config(mode="both")
    assert "preference dataset" in problems(exc)["mode"]
    with pytest.raises(ValidationError) as exc:  # the loss in an RL preset
        load_recipe("smoke").with_overrides({"algorithm.policy_loss_fn": "dpo"})
    assert "preference pairs of a dataset" in problems(exc)["algorithm.policy_loss_fn"]
    with pytest.raises(ValidationError) as exc:  # pair columns belong to the trainer's dataset, not to tasks
        load_recipe("smoke").with_overrides({"buffer.explorer_input.taskset.format.chosen_key": "good"})
    assert "preference pairs are read from" in problems(exc)["buffer.explorer_input.taskset.format.chosen_key"]


def test_pair_columns_beside_sft_are_a_warning() -> None:
    config = dpo_config(algorithm={"algorithm_type": "sft"},
                        **{"buffer.trainer_input.experience_buffer.format.chosen_key": "good"})
    assert any(w.startswith("buffer.trainer_input.experience_buffer.format.chosen_key: only a preference loss")
               for w in config.warnings), config.warnings


# ----------------------------------------------------------------------------- the data
def _pairs(dataset: dict[str, Any]) -> tuple:
    storage = StorageConfig.model_validate({"name": "pairs", **dataset})
    return preference_pairs(storage.model_dump_json(), str(resolve_model_path(MODEL)), 256, 64)


def test_pairs_are_rendered_with_the_chat_template_chosen_first(tmp_path: Path) -> None:
    pairs = _pairs({"path": str(write_pairs(tmp_path / "pairs.jsonl")),
                    "format": {"prompt_type": "plaintext", "system_prompt": SYSTEM}})
    assert len(pairs) == len(ROWS)
    renderer = renderer_for(MODEL)
    for (chosen, rejected), row in zip(pairs, ROWS, strict=True):
        assert chosen.eid.endswith("/chosen") and rejected.eid.endswith("/rejected")
        prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": row["prompt"]}]
        assert chosen.prompt_token_ids == rejected.prompt_token_ids == renderer.render(prompt)
        assert renderer.decode_raw(chosen.response_token_ids).startswith(row["chosen"])
        assert renderer.decode_raw(rejected.response_token_ids).startswith(row["rejected"])
        assert chosen.advantage == 0.0 and len(chosen.logprobs) == len(chosen.response_token_ids)


def test_parquet_messages_pairs_read_the_same(tmp_path: Path) -> None:
    """Trinity's messages layout (the prompt's messages, each response's assistant messages), from Parquet,
    gives the same tokens as the plaintext layout of the same pairs."""
    import pandas as pd

    rows = [{"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": r["prompt"]}],
             "good": [{"role": "assistant", "content": r["chosen"]}],
             "bad": [{"role": "assistant", "content": r["rejected"]}]} for r in ROWS]
    pd.DataFrame(rows).to_parquet(tmp_path / "pairs.parquet")
    from_parquet = _pairs({"path": str(tmp_path / "pairs.parquet"), "format": {
        "prompt_type": "messages", "messages_key": "messages", "chosen_key": "good", "rejected_key": "bad"}})
    plaintext = _pairs({"path": str(write_pairs(tmp_path / "pairs.jsonl")),
                        "format": {"prompt_type": "plaintext", "system_prompt": SYSTEM}})
    ids = [[(e.prompt_token_ids, e.response_token_ids) for e in pair] for pair in from_parquet]
    assert ids == [[(e.prompt_token_ids, e.response_token_ids) for e in pair] for pair in plaintext]


def test_a_row_without_its_rejected_response_is_named(tmp_path: Path) -> None:
    rows = [dict(ROWS[0]), {k: v for k, v in ROWS[1].items() if k != "rejected"}]
    with pytest.raises(TasksetError, match="rejected"):
        _pairs({"path": str(write_pairs(tmp_path / "bad.jsonl", rows)), "format": {"prompt_type": "plaintext"}})


def test_preflight_reads_the_pair_columns(tmp_path: Path) -> None:
    from preflight import check_tasksets

    lines = check_tasksets(dpo_config(write_pairs(tmp_path / "pairs.jsonl")))
    assert any("experience_buffer: 4 tasks" in line and "keys prompt, chosen, rejected" in line for line in lines), lines


def test_pairs_are_scored_at_temperature_one_whatever_a_taskset_samples_at() -> None:
    from backends.trainer import scoring_temperature

    hot = {"buffer.explorer_input.taskset.rollout_args.temperature": 0.7}
    assert scoring_temperature(dpo_config(**hot)) == 1.0  # not sampled: the model's own distribution
    assert scoring_temperature(load_recipe("smoke").with_overrides(hot)) == 0.7


# ----------------------------------------------------------------------------- steps on the real model
def test_dpo_steps_raise_the_chosen_responses_over_the_rejected_ones(tmp_path: Path) -> None:
    """Three torch-trainer steps on the same two pairs: at the first the policy is its reference (margin 0);
    then the implicit reward's margin grows and every pair is ranked right."""
    from backends.torch_trainer import TorchTrainer

    config = dpo_config(tmp_path / "pairs.jsonl", **{"algorithm.optimizer.lr": 1e-5, "trainer.micro_batch_size": 2})
    pairs = _pairs({"path": str(write_pairs(tmp_path / "pairs.jsonl")),
                    "format": {"prompt_type": "plaintext", "system_prompt": SYSTEM}})
    batch = [e for pair in pairs[:2] for e in pair]
    trainer = TorchTrainer(config, resolve_model_path(MODEL), total_steps=3)
    assert trainer.reference is not None  # the stage's starting model
    steps = [trainer.train_step(batch) for _ in range(3)]
    assert abs(steps[0]["reward_margin"]) < 1e-4 and steps[0]["reward_accuracy"] == 0.0
    assert steps[0]["dpo_loss"] == pytest.approx(math.log(2), abs=1e-4)  # −log σ(0)
    assert steps[0]["reward_margin"] < steps[1]["reward_margin"] < steps[2]["reward_margin"], steps
    assert steps[2]["reward_accuracy"] == 1.0 and steps[2]["chosen_reward"] > steps[2]["rejected_reward"]
    assert {"kl_loss", "loss", "grad_norm"} <= steps[2].keys()  # the preset's KL term (k2) rides along, as in Trinity


# ----------------------------------------------------------------------------- a whole run (slow)
@pytest.mark.slow
def test_rft_run_of_a_dpo_stage_moves_the_reward_margin_and_writes_a_checkpoint(tmp_path: Path) -> None:
    """`rft` with a DPO stage on four pairs (the real flow: Prefect, the policy's trainer, checkpoints): three
    steps, the margin and the accuracy of the implicit reward rise, the last checkpoint and the final model
    are written."""
    from flows.rft import rft
    from tracking import progress

    held_out = write_pairs(tmp_path / "heldout.jsonl", [
        {"prompt": f"What is {i} + 3?", "chosen": f"{i} + 3 = {i + 3}.", "rejected": f"{i} + 3 = {i + 4}."} for i in (7, 9)])
    config = dpo_config(write_pairs(tmp_path / "pairs.jsonl"), **{
        "name": "dpo-smoke", "checkpoint_root_dir": str(tmp_path / "ckpt"), "cluster.ray_address": "local",
        "buffer.train_batch_size": 4, "buffer.total_steps": 3, "algorithm.optimizer.lr": 1e-5,
        "trainer.save_interval": 0, "trainer.max_checkpoints_to_keep": 1, "monitor.monitor_type": "tensorboard",
        "buffer.trainer_input.eval_pairs": {"name": "held-out", "path": str(held_out),
                                            "format": {"prompt_type": "plaintext", "system_prompt": SYSTEM}},
    })
    assert not config.warnings, config.warnings
    seen: list[tuple[int, dict[str, float]]] = []
    progress.LISTENERS.append(lambda step, total, metrics: seen.append((step, dict(metrics))))
    try:
        outcome = rft(config=config)[config.name]
    finally:
        progress.LISTENERS.clear()
    assert outcome["steps"] == 3
    by_step = {step: metrics for step, metrics in seen}
    first, last = by_step[1], by_step[3]
    assert abs(first["train/reward_margin"]) < 1e-4
    assert last["train/reward_margin"] > first["train/reward_margin"] and last["train/reward_accuracy"] > first["train/reward_accuracy"]
    exp = config.experiment_dir
    assert (exp / "global_step_3").is_dir()
    assert list(Path(outcome["final_model"]).glob("*.safetensors"))
    # the held-out pairs, scored by the trainer before the first step and after the last (no engine needed)
    before, after = outcome["eval_at_start"]["held-out"], outcome["eval"]["held-out"]
    assert before["pairs"] == after["pairs"] == 2.0
    assert after["preference_margin"] > before["preference_margin"], (before, after)
