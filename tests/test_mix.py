"""The mix family (docs/mix.md): expert rows of an SFT dataset join each RL batch (tasks/expert.py), and the `mix` /
`mix_chord` losses train on both (algorithms/policy_loss/mix.py). The losses against hand-computed numbers,
the micro-batch rule, CHORD's μ schedule, the rows a step adds, the rules; and (slow) a whole run."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

import algorithms
from algorithms.policy_loss.mix import chord_mu
from checkpointing.layout import BUFFER_DB
from deployments import load_recipe
from schemas import ExperimentConfig, describe_errors
from tasks.expert import expert_count, expert_rows


def _algorithm(loss: str, **args: object) -> SimpleNamespace:
    return SimpleNamespace(policy_loss_fn=loss, policy_loss_fn_args=args, kl_loss_fn="none", kl_loss_fn_args={},
                           entropy_loss_fn="none", entropy_loss_fn_args={})


def _inputs(**fields: object) -> algorithms.LossInputs:
    """Two sampled rows (advantages +1 and −1) and two expert rows, 3 response tokens each, the last of row 1 padding;
    on-policy (old = current), so PPO's loss is −mean(advantage) over the sampled tokens."""
    logprobs = torch.log(torch.tensor([[0.5, 0.4, 0.3], [0.2, 0.6, 0.9], [0.9, 0.5, 0.1], [0.8, 0.7, 0.6]]))
    logprobs.requires_grad_(True)
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]])
    return algorithms.LossInputs(
        logprobs=logprobs, old_logprobs=logprobs.detach().clone(), advantages=torch.tensor([[1.0] * 3, [-1.0] * 3,
                                                                                            [0.0] * 3, [0.0] * 3]),
        response_mask=mask, expert_mask=torch.tensor([False, False, True, True]), **fields)


def test_mix_is_ppo_on_the_sampled_rows_plus_mu_times_nll_on_the_expert_rows() -> None:
    inputs = _inputs()
    loss, metrics = algorithms.compute_loss(_algorithm("mix", mu=0.25), inputs)
    ppo = -(3 * 1.0 + 2 * -1.0) / 5  # token-mean over the 5 sampled tokens
    lp = inputs.logprobs.detach()
    nll = (-(lp[2].mean()) - lp[3].mean()) / 2  # per sequence first (use_token_level_loss_in_sft false)
    assert loss.item() == pytest.approx(0.75 * ppo + 0.25 * nll.item(), abs=1e-6)
    assert metrics["mu"] == 0.25 and metrics["expert/sft_loss"] == pytest.approx(nll.item(), abs=1e-6)
    loss.backward()
    assert inputs.logprobs.grad is not None and bool((inputs.logprobs.grad[2:] != 0).all())


def test_mix_losses_of_micro_batches_add_up_to_the_whole_batch_loss() -> None:
    """Each part is normalised by its own whole-batch counts, so any split of the rows gives the same loss."""
    for loss_fn, args in (("mix", {"mu": 0.3, "use_token_level_loss_in_sft": True}), ("mix_chord", {})):
        whole = _inputs()
        expected, _ = algorithms.compute_loss(_algorithm(loss_fn, **args), whole)
        counts = {"global_num_tokens": int(whole.response_mask.sum()), "global_num_seqs": 4,
                  "global_expert_tokens": 6, "global_expert_seqs": 2}
        total = 0.0
        for rows in ([0, 2], [1], [3]):  # mixed, sampled only, expert only
            part = algorithms.LossInputs(
                logprobs=whole.logprobs[rows], old_logprobs=whole.old_logprobs[rows], advantages=whole.advantages[rows],
                response_mask=whole.response_mask[rows], expert_mask=whole.expert_mask[rows], **counts)
            total += algorithms.compute_loss(_algorithm(loss_fn, **args), part)[0].item()
        assert total == pytest.approx(expected.item(), abs=1e-6), loss_fn


def test_chord_weights_expert_tokens_by_phi_and_schedules_mu() -> None:
    args = {"mu_warmup_steps": 10, "mu_decay_steps": 20, "mu_peak": 0.5, "mu_valley": 0.1}
    assert [chord_mu(s, args) for s in (0, 5, 10, 20, 30, 99)] == pytest.approx([0.0, 0.25, 0.5, 0.3, 0.1, 0.1])
    inputs = _inputs(step=5)
    loss, metrics = algorithms.compute_loss(_algorithm("mix_chord", **args), inputs)
    p = inputs.logprobs.detach()[2:].exp()
    phi = (-p.log() * p * (1 - p)).sum() / 6  # token-mean (use_token_level_loss_in_sft true)
    assert metrics["mu"] == 0.25
    assert loss.item() == pytest.approx(0.75 * (-(3 - 2) / 5) + 0.25 * phi.item(), abs=1e-6)


def test_the_mix_entropy_term_averages_the_sampled_rows_only() -> None:
    entropy = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [5.0, 5.0, 5.0], [5.0, 5.0, 5.0]])
    alg = _algorithm("mix", mu=0.0)
    alg.entropy_loss_fn, alg.entropy_loss_fn_args = "mix", {"entropy_coef": 0.5}
    _, metrics = algorithms.compute_loss(alg, _inputs(entropy=entropy))
    assert metrics["entropy"] == pytest.approx(1.0)  # the expert rows' 5s are left out
    alg.entropy_loss_fn = "default"
    assert algorithms.compute_loss(alg, _inputs(entropy=entropy))[1]["entropy"] == pytest.approx(35 / 11)  # every row: (5 + 30) / 11 tokens


def test_a_mix_loss_without_expert_rows_names_the_sample_strategy() -> None:
    inputs = _inputs()
    inputs.expert_mask = None
    with pytest.raises(ValueError, match="sample_strategy 'mix'"):
        algorithms.compute_loss(_algorithm("mix"), inputs)


# ----------------------------------------------------------------------------- the rows a step adds, the rules
def _config(tmp_path: Path, **overrides: object) -> ExperimentConfig:
    (tmp_path / "expert.jsonl").write_text("".join(
        json.dumps({"prompt": f"What is {a} + 1?", "response": f"\\boxed{{{a + 1}}}"}) + "\n" for a in range(5)))
    return load_recipe("smoke").with_overrides({
        "algorithm.algorithm_type": "mix", "buffer.trainer_input.auxiliary_buffers": {"sft_dataset": {
            "path": str(tmp_path / "expert.jsonl"), "format": {"prompt_type": "plaintext"}}}, **overrides})


def test_a_step_adds_the_next_expert_rows_round_and_round(tmp_path: Path) -> None:
    config = _config(tmp_path, **{"algorithm.sample_strategy_args": {"expert_data_ratio": 0.25}})
    assert expert_count(config, 12) == 4  # a quarter of 12 + 4
    first, second = expert_rows(config, 1, 12), expert_rows(config, 2, 12)
    assert all(e.expert and e.advantage == 0.0 for e in first + second)
    ids = [e.prompt_token_ids + e.response_token_ids for e in first + second]
    assert ids[5] == ids[0] and ids[1] != ids[0]  # five rows: the second step's second row is the first again
    assert [e.eid for e in second] == [f"expert/2/{i}" for i in range(4)]
    assert expert_rows(config, 2, 12)[0].prompt_token_ids == second[0].prompt_token_ids  # a retried step: the same rows
    assert expert_rows(load_recipe("smoke"), 1, 12) == []


def test_the_mix_strategy_and_the_mix_losses_need_each_other(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({"algorithm.algorithm_type": "mix_chord"})
    assert any(line.startswith("buffer.trainer_input.auxiliary_buffers.sft_dataset: required by algorithm.sample_strategy")
               for line in describe_errors(exc.value)), describe_errors(exc.value)
    with pytest.raises(ValidationError) as exc:
        _config(tmp_path, **{"algorithm.policy_loss_fn": "ppo"})
    assert any(line.startswith("algorithm.sample_strategy: 'mix' adds expert rows") for line in describe_errors(exc.value))
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({"algorithm.policy_loss_fn": "mix"})
    assert any(line.startswith("algorithm.policy_loss_fn: 'mix' trains on") for line in describe_errors(exc.value))
    grpo = _config(tmp_path, **{"algorithm.algorithm_type": "grpo"})
    assert any(w.startswith("buffer.trainer_input.auxiliary_buffers: read only by algorithm.sample_strategy 'mix'")
               for w in grpo.warnings)
    assert _config(tmp_path, trainer={"trainer_type": "verl"}).trainer.trainer_type == "verl"  # our loss in its engine
    with pytest.raises(ValidationError) as exc:  # Tinker's trainer takes no expert rows
        _config(tmp_path, trainer={"trainer_type": "tinker"}, **{"explorer.rollout_model.engine_type": "tinker",
                                                                 "synchronizer.sync_method": "checkpoint"})
    assert any(line.startswith("algorithm.algorithm_type: 'mix' needs expert (SFT) rows") and "'tinker'" in line
               for line in describe_errors(exc.value)), describe_errors(exc.value)
    with pytest.raises(ValidationError) as exc:  # an expert dataset is read like an SFT dataset: its settings too
        _config(tmp_path, **{"buffer.trainer_input.auxiliary_buffers.sft_dataset.format.prompt_type": "chatpair"})
    assert any(line.startswith("buffer.trainer_input.auxiliary_buffers.sft_dataset.format.prompt_type: 'chatpair'")
               for line in describe_errors(exc.value)), describe_errors(exc.value)


# ----------------------------------------------------------------------------- a whole run (slow)
@pytest.mark.slow
@pytest.mark.full  # a whole run, ~2 min: scripts/test.sh --full (CI's 90 minutes are full)
def test_a_mix_run_trains_on_sampled_and_expert_rows(tmp_path: Path, tiny_model_path: str) -> None:
    """`rft run` of mix_chord on arith with the arith warm-up's SFT data as expert rows: every train step adds them,
    the sampled experiences are each trained once, and MLflow has both parts of the loss (and the explorer's
    experience pipeline, its pass rates)."""
    from mlflow.tracking import MlflowClient

    from flows.rft import rft
    from tracking import tracking_uri

    arith = load_recipe("arith")
    expert = arith.stages[0].buffer.trainer_input.experience_buffer.model_dump(mode="json", exclude_unset=True)
    config: ExperimentConfig = arith.with_overrides({
        "name": "mix", "checkpoint_root_dir": str(tmp_path), "stages": [], "model.model_path": tiny_model_path,
        "algorithm.algorithm_type": "mix_chord", "algorithm.repeat_times": 2,
        "algorithm.sample_strategy_args": {"expert_data_ratio": 0.25},
        "algorithm.policy_loss_fn_args": {"mu_warmup_steps": 2, "mu_peak": 0.5, "mu_valley": 0.5},
        "buffer.trainer_input.auxiliary_buffers": {"sft_dataset": expert},
        "buffer.batch_size": 3, "buffer.total_steps": 2, "explorer.eval_on_startup": False,
        "buffer.explorer_input.eval_tasksets": [], "trainer.save_interval": 2, "model.max_response_tokens": 24,
        # and Trinity's experience pipeline on the explorer (buffer/operators.py): it keeps every experience here
        "data_processor.experience_pipeline": {"operators": [{"name": "pass_rate_calculator"}]},
    })
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 2
    saved = (config.experiment_dir / "experience_pipeline" / "input.jsonl").read_text().splitlines()
    assert len(saved) == 12  # save_input: every step's experiences as they came, before the operators
    with sqlite3.connect(config.experiment_dir / BUFFER_DB) as db:
        trained = [step for (step,) in db.execute("SELECT train_step FROM experiences")]
    assert sorted(trained) == [1] * 6 + [2] * 6  # the buffer holds the sampled rows only, each trained once
    client = MlflowClient(tracking_uri=tracking_uri(config))
    history = {key: [m.value for m in sorted(client.get_metric_history(outcome["mlflow_run_id"], key), key=lambda m: m.step)]
               for key in ("train/expert_rows", "train/mu", "train/expert/sft_phi_loss",
                           "explore/pipeline/pass_rate_calculator/pass_rate")}
    assert len(history["explore/pipeline/pass_rate_calculator/pass_rate"]) == 2
    assert history["train/expert_rows"] == [2.0, 2.0]  # a quarter of 6 + 2
    assert history["train/mu"] == [0.25, 0.5]  # the warm-up: step 1 of 2, then the peak
    assert all(math.isfinite(v) and v > 0 for v in history["train/expert/sft_phi_loss"])
