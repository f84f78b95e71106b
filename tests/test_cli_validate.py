"""`rft validate` and `rft import-trinity` through typer's CliRunner (and the installed console script once)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from deployments import load_recipe

FIXTURES = Path(__file__).parent / "fixtures" / "trinity"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_trinity_env(monkeypatch):
    for var in ("TRINITY_CHECKPOINT_ROOT_DIR", "TRINITY_MODEL_PATH", "TRINITY_TASKSET_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "200")


def _stage_jsons(output: str) -> list[dict]:
    """The JSON documents `rft validate` printed, one per stage."""
    docs, depth, start = [], 0, None
    for i, ch in enumerate(output):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                docs.append(json.loads(output[start : i + 1]))
    return docs


def test_validate_recipe_prints_the_resolved_config():
    result = runner.invoke(app, ["validate", "smoke"])
    assert result.exit_code == 0, result.output
    (doc,) = _stage_jsons(result.output)
    assert doc["name"] == "smoke" and doc["buffer"]["train_batch_size"] == 4
    assert doc["derived"]["buffer.train_batch_size"].startswith("buffer.batch_size (2)")
    assert "stage 1/1: smoke (mode both)" in result.output and "valid" in result.output


def test_validate_with_set_overrides():
    result = runner.invoke(app, ["validate", "gsm8k", "--set", "algorithm.optimizer.lr=2e-6", "--set", "buffer.total_steps=4"])
    assert result.exit_code == 0, result.output
    sft, grpo = _stage_jsons(result.output)  # the base settings are the GRPO stage's; the warm-up has its own
    assert grpo["algorithm"]["optimizer"]["lr"] == 2e-6 and grpo["buffer"]["total_steps"] == 4
    assert sft["algorithm"]["optimizer"]["lr"] == 1e-4 and sft["buffer"]["total_steps"] == 80


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["validate", "gsm8k", "--set", "algorithm.policy_loss_fn_args.clip_rang=0.1"], "algorithm.policy_loss_fn_args.clip_rang"),
        (["validate", "gsm8k", "--set", "algorithm.optimizer.lrr=1"], "algorithm.optimizer.lrr"),
        (["validate", "gsm8k", "--set", "algorithm.repeat_times=1"], "algorithm.repeat_times"),
        (["validate", "gsm8k", "--set", "algorithm.optimizer.lr"], "PATH=VALUE"),
        (["validate", "no-such-recipe"], "known recipes: gsm8k, arith, arith-dpo, smoke"),
        (["validate", "missing.yaml"], "missing.yaml: no such file"),
    ],
)
def test_validate_errors_exit_1_and_name_the_problem(args, expected):
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert expected in result.output


def test_validate_trinity_yaml_with_stages():
    result = runner.invoke(app, ["validate", str(FIXTURES / "sft_warmup.yaml")])
    assert result.exit_code == 0, result.output
    sft, rft = _stage_jsons(result.output)
    assert sft["name"] == "qwen-sft-rft/sft_warmup" and sft["mode"] == "train"
    assert rft["model"]["model_path"].endswith("sft_warmup/final/huggingface")
    assert "stage 2/2: qwen-sft-rft/rft" in result.output


def test_validate_trinity_yaml_unsupported_keys_fail_unless_allowed():
    path = str(FIXTURES / "gspo.yaml")
    refused = runner.invoke(app, ["validate", path])
    assert refused.exit_code == 1 and "explorer.rollout_model.use_v1: not supported" in refused.output
    allowed = runner.invoke(app, ["validate", path, "--allow-unsupported"])
    assert allowed.exit_code == 0, allowed.output
    assert "warning" in allowed.output and "explorer.rollout_model.use_v1" in allowed.output


def test_validate_json_and_py_files(tmp_path):
    dumped = tmp_path / "exp.json"
    dumped.write_text(load_recipe("gsm8k").model_dump_json())
    result = runner.invoke(app, ["validate", str(dumped)])
    assert result.exit_code == 0, result.output
    assert [doc["name"] for doc in _stage_jsons(result.output)] == ["gsm8k/sft_warmup", "gsm8k/grpo"]

    recipe = tmp_path / "my_recipe.py"
    recipe.write_text("from deployments import load_recipe\nconfig = load_recipe('smoke').with_overrides({'name': 'mine'})\n")
    result = runner.invoke(app, ["validate", str(recipe)])
    assert result.exit_code == 0, result.output
    assert _stage_jsons(result.output)[0]["name"] == "mine"

    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"project": "p", "name": "n", "buffer": {"batch_size": "x"}}))
    result = runner.invoke(app, ["validate", str(broken)])
    assert result.exit_code == 1 and "buffer.batch_size" in result.output


def test_import_trinity_prints_json():
    result = runner.invoke(app, ["import-trinity", str(FIXTURES / "quickstart.yaml")])
    assert result.exit_code == 0, result.output
    (doc,) = _stage_jsons(result.output)
    assert doc["model"]["model_path"] == "Qwen/Qwen2.5-1.5B-Instruct" and doc["buffer"]["batch_size"] == 128


def test_import_trinity_writes_a_recipe_that_validates(tmp_path):
    out = tmp_path / "qwen_quickstart.py"
    result = runner.invoke(app, ["import-trinity", str(FIXTURES / "sft_warmup.yaml"), "--output", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith('"""qwen-quickstart — imported from') and "config = ExperimentConfig.model_validate(" in text
    result = runner.invoke(app, ["validate", str(out)])
    assert result.exit_code == 0, result.output
    assert len(_stage_jsons(result.output)) == 2


def test_import_trinity_refuses_unsupported_and_non_yaml(tmp_path):
    result = runner.invoke(app, ["import-trinity", str(FIXTURES / "gspo.yaml")])
    assert result.exit_code == 1 and "explorer.rollout_model.use_v1" in result.output
    result = runner.invoke(app, ["import-trinity", str(FIXTURES / "gspo.yaml"), "--allow-unsupported"])
    assert result.exit_code == 0, result.output
    (tmp_path / "x.json").write_text("{}")
    result = runner.invoke(app, ["import-trinity", str(tmp_path / "x.json")])
    assert result.exit_code == 1 and "expected a .yaml file" in result.output


def test_import_trinity_lists_every_key_mapped_onto_a_refused_or_warned_setting(tmp_path):
    path = str(FIXTURES / "refused_and_warned.yaml")
    result = runner.invoke(app, ["import-trinity", path])
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    assert result.exit_code == 1
    refused = [line.split(": ")[2] for line in lines if line.startswith("error:")]
    warned = [line.split(": ")[2] for line in lines if line.startswith("warning:")]
    assert "explorer.auxiliary_models" not in refused and "buffer.trainer_input.sft_warmup_steps" in refused
    assert "model.logprobs" in warned and len(refused) == 7 and len(warned) == 5
    out = tmp_path / "opmd.py"
    result = runner.invoke(app, ["import-trinity", path, "--allow-unsupported", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.count("warning:") == 7 + 5  # the refused keys (left out) and the warned ones (kept)
    assert runner.invoke(app, ["validate", str(out)]).exit_code == 0


def test_console_script_is_installed():
    rft = shutil.which("rft", path=os.path.dirname(sys.executable)) or shutil.which("rft")
    if rft is None:
        pytest.skip("the rft console script is not installed (pip install -e .)")
    proc = subprocess.run([rft, "validate", "smoke"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"name": "smoke"' in proc.stdout
    proc = subprocess.run([rft, "validate", "gsm8k", "--set", "buffer.batch_size=0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "buffer.batch_size" in proc.stderr


def test_validate_check_runs_the_preflight_and_names_each_problem(tmp_path: Path) -> None:
    ok = runner.invoke(app, ["validate", "smoke", "--check", "--set", f"checkpoint_root_dir={tmp_path}"])
    assert ok.exit_code == 0, ok.output
    assert "model.model_path: " in ok.output and "ready to run" in ok.output
    bad = runner.invoke(app, ["validate", "smoke", "--check", "--set", f"checkpoint_root_dir={tmp_path}",
                              "--set", "model.model_path=/nowhere/model",
                              "--set", "buffer.explorer_input.taskset.path=/nowhere/tasks.jsonl"])
    assert bad.exit_code == 1
    assert "smoke: model.model_path: '/nowhere/model': no such folder" in bad.output
    assert "smoke: buffer.explorer_input.taskset.path: taskset 'gsm8k': path '/nowhere/tasks.jsonl' not found" in bad.output
    assert not (tmp_path / "rft").exists()  # nothing was started or written
