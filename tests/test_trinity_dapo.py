"""Trinity-RFT's DAPO example (examples/dapo_math/dapo.yaml; trimmed in tests/fixtures/trinity/examples/) as
its user runs it here (issue 25): with the lengths written where Trinity needs them too (`model.*`), a
small local model and the bundled GSM8K instead of DAPO-Math-17k, and the torch trainer on CPU instead of
veRL. Its `math_boxed_workflow` with `use_base: true` sends the plain-text prompt of a base model
("System:...\\nUser:\\n...\\nAssistant:\\n", no chat template), and so it does here."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from buffer.taskset import load_taskset
from cli.main import app
from cli.validate import load_or_exit
from schemas.trinity.importer import import_trinity
from schemas.trinity.workflows import MATH_BOXED_PROMPT
from workflows.math_workflow import MathWorkflow
from workflows.render import renderer_for

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "fixtures" / "trinity" / "examples" / "dapo_math.yaml"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
# What the user substitutes on the command line: a small model and short lengths, 2 bundled GSM8K problems
# (its columns) × 2 rollouts, no AIME evaluation, one step; CPU instead of 8 GPUs, and the torch trainer for
# veRL (the file's trainer_config_path, a veRL file of Trinity's repository, is left out with --allow-unsupported).
SETS = {
    "model.model_path": MODEL, "model.max_prompt_tokens": 256, "model.max_response_tokens": 16, "model.max_model_len": 272,
    "buffer.explorer_input.taskset.path": "data/gsm8k", "buffer.explorer_input.taskset.split": "train[:2]",
    "buffer.explorer_input.taskset.format.prompt_key": "question",
    "buffer.explorer_input.taskset.format.response_key": "answer",
    "buffer.explorer_input.eval_tasksets": "[]", "explorer.eval_on_startup": "false",
    "buffer.batch_size": 2, "buffer.total_steps": 1, "algorithm.repeat_times": 2,
    "cluster.gpu_per_node": 0, "cluster.ray_address": "local", "explorer.rollout_model.engine_num": 1,
    "explorer.rollout_model.dtype": "float32", "explorer.rollout_model.enforce_eager": "true",
    "explorer.rollout_model.kv_cache_memory_gb": 1, "trainer.trainer_type": "torch",
    "synchronizer.sync_method": "memory", "synchronizer.sync_interval": 1, "monitor.monitor_type": "tensorboard",
}
OVERRIDES = [f"{key}={value}" for key, value in SETS.items()]
# Left out with --allow-unsupported: `subset` (Trinity's later copy of the file says subset_name) and
# trainer_config_path (Trinity itself refuses it now).
LEFT_OUT = ["buffer.explorer_input.taskset.subset", "trainer.trainer_config_path"]


def user_file(tmp_path: Path) -> Path:
    """The example with its user's edits: the /PATH/TO/ placeholders filled, and the lengths that the import
    names as the fix (Trinity's example sets them under explorer.rollout_model only) written under model."""
    text = EXAMPLE.read_text().replace("/PATH/TO/", f"{tmp_path}/")
    text = text.replace("model: {model_path:", "model: {max_prompt_tokens: 1024, max_response_tokens: 20480, model_path:")
    path = tmp_path / "dapo.yaml"
    path.write_text(text)
    return path


def plain_prompt(question: str) -> str:
    """MathBoxedWorkflow.format_prompt of Trinity under its default system prompt."""
    return f"System:{MATH_BOXED_PROMPT}\nUser:\n{question}\nAssistant:\n"


def test_the_dapo_example_imports_and_validates_with_local_substitutions(tmp_path: Path) -> None:
    path = user_file(tmp_path)
    _, unsupported = import_trinity(path)
    assert [u.split(": ")[0] for u in unsupported] == LEFT_OUT
    result = CliRunner().invoke(app, ["validate", str(path), "--allow-unsupported",
                                      *(a for s in OVERRIDES for a in ("--set", s))])
    assert result.exit_code == 0, result.output
    config = load_or_exit(str(path), OVERRIDES, allow_unsupported=True)
    ts = config.buffer.explorer_input.taskset
    assert (ts.default_workflow_type, ts.default_reward_fn_type) == ("math_workflow", "math_boxed_reward")
    assert ts.format.base_model_prompt and ts.format.system_prompt == MATH_BOXED_PROMPT and ts.workflow_args == {}
    assert config.derived["buffer.explorer_input.taskset.format.base_model_prompt"].startswith(
        "alias: buffer.explorer_input.taskset.workflow_args.use_base")
    assert config.derived["explorer.rollout_model.max_prompt_tokens"].startswith("alias: dropped: the same as model.")
    assert (config.trainer.trainer_type, config.model.max_response_tokens) == ("torch", 16)
    assert config.algorithm.policy_loss_fn_args["clip_range_high"] == 0.28
    # the prompt its tasks get: Trinity's plain text, tokenized without the chat template
    task = load_taskset(ts)[0]
    renderer = renderer_for(MODEL)
    prompt = MathWorkflow(task, None, renderer, repeat_times=2, explore_step=1, model_version=0).prompt()
    assert prompt == plain_prompt(task.raw["question"])
    assert renderer.encode_plain(prompt) != renderer.render([{"role": "user", "content": task.raw["question"]}])


@pytest.mark.full  # CI's 90 minutes: scripts/test.sh --full (docs/testing.md, 2026-11-29)
@pytest.mark.slow  # Ray, vLLM and the torch trainer: one step of 2 tasks × 2 rollouts of 16 tokens
def test_the_dapo_example_runs_a_step_on_the_plain_text_prompt(tmp_path: Path, tiny_model_path: str) -> None:
    path = user_file(tmp_path)
    config = load_or_exit(str(path), OVERRIDES, allow_unsupported=True)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(tmp_path / "prefect")}
    # the tiny model (tests/tiny_model.py): SmolLM2's tokenizer and template, so the same prompt tokens; the step is
    # checked, not what it learns
    sets = [*OVERRIDES, f"model.model_path={tiny_model_path}"]
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "run", str(path), "--allow-unsupported", *(a for s in sets for a in ("--set", s))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    with sqlite3.connect(config.experiment_dir / "buffer" / "experiences.db") as conn:
        rows = [(json.loads(data), step) for data, step in conn.execute("SELECT data, train_step FROM experiences")]
    assert len(rows) == 4 and {step for _, step in rows} == {1}  # 2 tasks × 2 rollouts, trained by step 1
    renderer = renderer_for(MODEL)
    sent = {tuple(e["prompt_token_ids"]) for e, _ in rows}
    expected = {tuple(renderer.encode_plain(plain_prompt(t.raw["question"])))
                for t in load_taskset(config.buffer.explorer_input.taskset)}
    assert sent == expected, [renderer.decode_raw(list(ids)) for ids in sent]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = {p.parent for p in (config.experiment_dir / "log" / "tensorboard").glob("*/events.out.tfevents.*")}
    acc = EventAccumulator(str(events))
    acc.Reload()
    # The random model's 16 tokens never end an answer: math_boxed_workflow masks every response cut at the limit
    # (Trinity's rule, the mask_response_truncated operator), so the step has no token to train on. It is an
    # empty step, said in the log, not a loss of 0/0 (NaN) from the trainer.
    assert all(e["info"]["finish_reason"] == "length" and not any(e["response_mask"]) for e, _ in rows)
    (empty,) = acc.Scalars("train/empty_step")
    assert (empty.step, empty.value) == (1, 1.0)
    assert "train/loss" not in acc.Tags()["scalars"]
    assert "none of its 4 experiences has a response token to train on" in proc.stdout + proc.stderr
