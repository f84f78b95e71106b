"""Every algorithm preset either trains or is refused by `rft validate`, naming algorithm.algorithm_type.

A preset that trains goes through what a run does with it: the explore side computes the advantages of
a scored batch (tasks.explore.fill_advantages, grouped as the workflow groups them) and the torch
trainer takes one optimizer step on it (the real SmolLM2-135M, on CPU); the loss must be finite and
have a gradient. One trainer serves every preset (they differ only in their algorithm settings). The
whole flow — engines, Prefect, the buffer, checkpoints — runs with grpo and sft in test_rft_flow.py
and with opmd below (slow).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import algorithms
from backends.torch_trainer import TorchTrainer
from buffer.experience import Experience
from cli.main import app
from deployments import load_recipe
from schemas import ExperimentConfig, support_check
from schemas.algorithm_registry import ALGORITHM_PRESETS
from tasks.expert import expert_rows
from tasks.explore import fill_advantages

# The presets with a runtime (each trains one step below), and those validation refuses.
# Trinity-RFT's presets added for issue 26 (docs/trinity-parity.md) are the second line of TRAINED (m2po: issue 73).
TRAINED = ["grpo", "rloo", "reinforceplusplus", "gspo", "opmd", "cispo", "dapo", "dapo_full", "sft", "raft",
           "asymre", "topr", "sapo", "sppo", "rec", "multi_step_grpo", "dpo", "ppo", "on_policy_distill", "jsd",
           "mix", "mix_chord", "m2po", "gigpo"]
REFUSED: list[str] = []
MIX = ("mix", "mix_chord")  # expert rows of an SFT dataset join the batch (tasks/expert.py)


def preset_config(preset: str, tmp: Path | None = None) -> ExperimentConfig:
    """The smoke recipe with only `algorithm_type` set in its algorithm section (the preset decides the
    rest); sft and dpo learn from a dataset, in mode train."""
    overrides: dict = {"algorithm": {"algorithm_type": preset}}
    if preset in ("on_policy_distill", "jsd"):  # a teacher: the first auxiliary model (docs/distill.md)
        overrides["explorer.auxiliary_models"] = [{"model_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}]
    if preset in MIX:
        overrides["buffer.trainer_input.auxiliary_buffers"] = {"sft_dataset": {
            "path": str(expert_file(tmp or Path("."))), "format": {"prompt_type": "plaintext"}}}
    if preset in ("sft", "dpo"):
        overrides |= {"mode": "train", "buffer.train_batch_size": 4, "buffer.trainer_input.experience_buffer": {
            "path": str((tmp or Path(".")) / f"{preset}.jsonl"), "format": {"prompt_type": "plaintext"}}}
    if preset == "gigpo":  # a workflow that records each step's state (algorithms/advantage/gigpo.py)
        overrides["buffer.explorer_input.taskset.default_workflow_type"] = "frozenlake"
    return load_recipe("smoke").with_overrides(overrides)


def expert_file(folder: Path) -> Path:
    """A small SFT dataset (plaintext rows) for the mix presets' expert rows."""
    path = folder / "expert.jsonl"
    if folder.is_dir() and not path.exists():
        path.write_text("".join(json.dumps({"prompt": f"What is {a} + 1?", "response": f"\\boxed{{{a + 1}}}"}) + "\n"
                                for a in range(3)))
    return path


def scored_batch(config: ExperimentConfig) -> list[Experience]:
    """Two tasks × repeat_times responses with rewards that differ within each group (dpo: a chosen and a rejected
    response to each of two prompts, the rows of two preference pairs)."""
    if config.algorithm.algorithm_type == "dpo":
        return [Experience(eid=f"t{task}/{side}", task_id=f"t{task}", group_id=f"t{task}",
                           prompt_token_ids=[1, 9690, 198, 2683, 314, 216, 33 + task], response_token_ids=response,
                           logprobs=[0.0] * len(response), reward=0.0)
                for task in range(2) for side, response in (("chosen", [504, 314, 216, 34 + task, 2]), ("rejected", [505, 2]))]
    group = config.algorithm.repeat_times
    out = []
    for task in range(2):
        for i in range(group):
            response = [504 + i, 314, 216, 34 + task, 2][: 3 + (i + task) % 3]
            out.append(Experience(
                eid=f"t{task}/{i}", task_id=f"t{task}", group_id=f"g{task}",
                prompt_token_ids=[1, 9690, 198, 2683, 314, 216, 33 + task], response_token_ids=response,
                logprobs=[-1.0 - 0.1 * i] * len(response), reward=float((i + task) % 2) + 0.1 * i,
                # what the teacher scored (distillation presets): surer of some tokens, less of others
                teacher_logprobs=[-0.5 - 0.3 * ((i + j) % 3) for j in range(len(response))]
                if algorithms.needs_teacher(config.algorithm) else None,
                # gigpo: one model turn per token, the first two in the same state in every episode of the group
                info={"step_states": ["start", "start", *[f"s{i}{j}" for j in range(len(response) - 2)]],
                      "turn_spans": [[j, j + 1] for j in range(len(response))],
                      "turn_rewards": [0.0] * len(response)} if config.algorithm.advantage_fn == "gigpo" else {},
            ))
    return out


@pytest.fixture(scope="module")
def trainer(tiny_model_path: str) -> TorchTrainer:
    # grpo's preset has a KL term, so the shared trainer holds a reference model for those that need one. The tiny
    # model (tests/tiny_model.py): a step's loss, gradient and metric names, not what it learns, are checked here.
    return TorchTrainer(preset_config("grpo"), Path(tiny_model_path), total_steps=20)


def test_every_preset_is_trained_here_or_refused():
    assert sorted(TRAINED + REFUSED) == sorted(ALGORITHM_PRESETS) and not set(TRAINED) & set(REFUSED)
    for preset in ALGORITHM_PRESETS:  # and a `SETTINGS` entry says the same
        found = support_check.entry_for(f"algorithm.algorithm_type[{preset}]")  # none: honoured
        refusal = found[1].unconditional if found is not None else None
        assert (refusal is not None and refusal.level == "refuse") == (preset in REFUSED), preset


@pytest.mark.parametrize("preset", TRAINED)
def test_preset_trains_a_step(preset: str, trainer: TorchTrainer, tmp_path: Path, tiny_model_path: str) -> None:
    config = preset_config(preset, tmp_path)
    if algorithms.needs_critic(config.algorithm):  # GAE: the advantages come from a critic the trainer holds
        trainer = TorchTrainer(config, Path(tiny_model_path), total_steps=20)
    trainer.config, trainer.algorithm = config, config.algorithm
    batch = scored_batch(config)
    # the rollout logprobs an engine serving the trainer's weights gives: the ratio starts at 1, as on-policy
    batch = [replace(e, logprobs=lp) for e, lp in zip(batch, trainer.logprobs(batch), strict=True)]
    fill_advantages(config, batch)
    experts = expert_rows(config, 1, len(batch))  # what tasks/train.py adds to the batch (mix strategy)
    assert len(experts) == (len(batch) if preset in MIX else 0)  # expert_data_ratio 0.5: as many as sampled
    batch += experts
    if algorithms.needs_critic(config.algorithm):
        assert all(e.advantage is None for e in batch)
    metrics = trainer.train_step(batch)
    assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0, metrics
    expected = {"opmd": "opmd_loss", "sft": "sft_loss", "raft": "sft_loss", "gspo": "pg_clipfrac", "cispo": "pg_clipfrac",
                "asymre": "opmd_loss", "topr": "avg_alpha", "sapo": "avg_soft_gate", "sppo": "pg_clipfrac",
                "rec": "pg_clipfrac", "dpo": "reward_accuracy", "mix": "expert/sft_loss", "mix_chord": "expert/sft_phi_loss"}
    assert expected.get(preset, "pg_loss") in metrics
    if algorithms.needs_critic(config.algorithm):
        assert metrics["critic/value_loss"] > 0 and math.isfinite(metrics["critic/vf_explained_var"]), metrics
    elif config.algorithm.advantage_fn not in ("none",):
        assert any(e.advantage != 0.0 for e in batch)


def test_rft_validate_names_what_a_preset_needs():
    result = CliRunner().invoke(app, ["validate", "smoke", "--set", "algorithm.algorithm_type=mix"])
    assert result.exit_code == 1
    assert "buffer.trainer_input.auxiliary_buffers.sft_dataset: required by algorithm.sample_strategy 'mix'" in " ".join(
        result.output.split())


# ----------------------------------------------------------------------------- a whole run (slow)
@pytest.mark.slow
@pytest.mark.full  # a whole run, ~1.7 min: scripts/test.sh --full (every preset still trains a step above)
def test_opmd_smoke_run_with_priority_sampling_tensorboard_and_every_hf_checkpoint(tmp_path: Path,
                                                                                   tiny_model_path: str) -> None:
    """The smoke recipe as opmd, through the real stack, with settings this project now honours:
    sample_strategy priority, monitor tensorboard (no MLflow at all), save_hf_checkpoint always,
    max_prompt_tokens (longer prompts skipped and counted), min_response_tokens, a Ray timeline."""
    from buffer.taskset import load_taskset
    from flows.rft import rft
    from tasks.setup import RAY_TIMELINE
    from workflows.math_workflow import MathWorkflow
    from workflows.render import renderer_for

    # the tiny model: this run checks the settings' effects, not what opmd learns
    base = preset_config("opmd").with_overrides({"checkpoint_root_dir": str(tmp_path / "ckpt"),
                                                 "model.model_path": tiny_model_path})
    # a prompt limit between the shortest and the longest prompt of the first batch: some are skipped
    renderer = renderer_for(base.model.model_path)
    tasks = load_taskset(base.buffer.explorer_input.taskset)[: base.buffer.batch_size * 2]
    lengths = sorted(len(renderer.render(MathWorkflow(t, None, renderer, repeat_times=1, explore_step=1, model_version=0)
                                         .messages())) for t in tasks)
    assert lengths[0] < lengths[-1]
    limit = lengths[-1] - 1
    config = base.with_overrides({
        "explorer.eval_on_startup": False, "buffer.explorer_input.eval_tasksets": [],  # cheaper: train only
        "algorithm.sample_strategy": "priority",
        "algorithm.sample_strategy_args": {"priority_fn": "largest_advantage"},
        "monitor.monitor_type": "tensorboard",
        "monitor.enable_ray_timeline": True,
        "trainer.save_hf_checkpoint": "always",
        "model.max_prompt_tokens": limit,
        "model.max_model_len": limit + base.model.max_response_tokens,
        "model.min_response_tokens": 4,
    })
    assert not config.warnings, config.warnings
    outcome = rft(config=config)[config.name]
    exp = config.experiment_dir
    assert outcome["steps"] == 2 and outcome["mlflow_run_id"].startswith("tensorboard|main|")
    assert not (tmp_path / "ckpt" / "mlflow.db").exists()  # monitor tensorboard: no MLflow
    events = list((exp / "log" / "tensorboard" / "main").glob("events.out.tfevents.*"))
    assert events
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"explore/reward_mean", "train/opmd_loss", "explore/prompts_too_long"} <= tags
    skipped = sum(e.value for e in acc.Scalars("explore/prompts_too_long"))
    assert skipped >= 1  # the longest prompt(s) of the batch
    for step in (1, 2):  # save_hf_checkpoint always: every checkpoint has its Hugging Face folder
        assert (exp / f"global_step_{step}" / "actor" / "huggingface" / "config.json").is_file()
    timeline = json.loads((exp / "log" / RAY_TIMELINE).read_text())
    assert isinstance(timeline, list) and timeline
