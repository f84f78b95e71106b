"""The smoke recipe through the real stack — Prefect, Ray, vLLM (CPU), the torch trainer, MLflow —
behind an SFT warm-up stage, as Trinity-RFT's `stages:` runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from buffer.experience_store import ExperienceStore
from checkpointing.layout import complete_steps
from schemas import ExperimentConfig
from tests.staged import sft_then_smoke
from tracking import EXPERIMENT_TAG, PARENT_TAG, ROLE_TAG, tracking_uri

pytestmark = pytest.mark.slow


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    files = sorted(model_dir.glob("*.safetensors"))
    assert files, f"no weights in {model_dir}"
    return {k: v for f in files for k, v in load_file(str(f)).items()}


def changed(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    return [k for k in a if k in b and not torch.equal(a[k].float(), b[k].float())]


@pytest.fixture(scope="module")
def staged_run(module_tmp_path: Path, tiny_model_path: str) -> tuple[list[ExperimentConfig], dict]:
    from flows.rft import rft
    from tracking import progress

    root = module_tmp_path
    rows = root / "sft.jsonl"
    rows.write_text("".join(
        json.dumps({"prompt": f"What is {i} + 3?", "response": f"{i} + 3 = {i + 3}. \\boxed{{{i + 3}}}"}) + "\n"
        for i in range(8)
    ))
    config = sft_then_smoke(rows, root, "rft", **{"model.model_path": tiny_model_path})  # orchestration, not learning
    seen: list[tuple[int, int]] = []
    progress.LISTENERS.append(lambda step, total, metrics: seen.append((step, total)))
    try:
        outcome = rft(config=config)
    finally:
        progress.LISTENERS.clear()
    outcome["progress_seen"] = seen
    return config.resolve_stages(), outcome


def test_stages_run_in_order_and_report_progress(staged_run: tuple[list[ExperimentConfig], dict]) -> None:
    (sft, rl), outcome = staged_run
    assert [outcome[sft.name]["steps"], outcome[rl.name]["steps"]] == [2, 2]
    assert outcome["progress_seen"] == [(1, 2), (2, 2), (1, 2), (2, 2)]
    assert set(outcome[rl.name]["eval"]) == {"gsm8k-eval"}
    assert 0.0 <= outcome[rl.name]["eval"]["gsm8k-eval"]["accuracy"] <= 1.0


def test_rl_stage_starts_from_the_sft_model(staged_run: tuple[list[ExperimentConfig], dict]) -> None:
    from checkpointing.models import resolve_model_path

    (sft, rl), outcome = staged_run
    assert Path(rl.model.model_path) == sft.final_model_dir
    base = weights(resolve_model_path(sft.model.model_path))
    after_sft = weights(Path(outcome[sft.name]["final_model"]))
    after_rl = weights(Path(outcome[rl.name]["final_model"]))
    assert changed(after_sft, base), "SFT changed no weight"
    assert changed(after_rl, after_sft), "RL changed no weight"


def test_every_experience_is_persisted_and_trained_once(staged_run: tuple[list[ExperimentConfig], dict]) -> None:
    _, rl = staged_run[0]
    store = ExperienceStore.for_experiment(rl.experiment_dir)
    try:
        per_step = rl.buffer.batch_size * rl.algorithm.repeat_times
        trained = store.trained_eids()
        assert store.count() == len(set(store.all_eids())) == 2 * per_step
        assert store.count_untrained() == 0 and len(trained) == 2 * per_step
        assert sorted(set(trained.values())) == [1, 2]
    finally:
        store.close()


def test_nothing_is_left_in_shared_memory(staged_run: tuple[list[ExperimentConfig], dict]) -> None:
    from backends.local.weight_sync import SHM_ROOT
    from backends.policy import experiment_id

    for stage in staged_run[0]:  # staging and serve folders take RAM the size of the model each
        assert not list(SHM_ROOT.glob(f"{experiment_id(stage)}*")), sorted(SHM_ROOT.iterdir())


def test_only_the_newest_checkpoint_is_kept(staged_run: tuple[list[ExperimentConfig], dict]) -> None:
    for stage in staged_run[0]:
        assert complete_steps(stage.experiment_dir) == [2], stage.name
        assert not list(stage.experiment_dir.glob(".global_step_*")), stage.name  # no partial or half-deleted one


def test_final_model_is_the_converted_last_checkpoint(staged_run: tuple[list[ExperimentConfig], dict]) -> None:
    from transformers import AutoModelForCausalLM

    _, rl = staged_run[0]
    final = Path(staged_run[1][rl.name]["final_model"])
    assert final == rl.experiment_dir.resolve() / "final" / "huggingface"
    assert final.resolve() == (rl.experiment_dir / "global_step_2" / "actor" / "huggingface").resolve()
    assert (final / "config.json").exists() and (final / "tokenizer.json").exists()
    AutoModelForCausalLM.from_pretrained(final)


def test_mlflow_runs_have_params_metrics_and_artifacts(staged_run: tuple[list[ExperimentConfig], dict]) -> None:
    (sft, rl), outcome = staged_run
    client = MlflowClient(tracking_uri=tracking_uri(rl))
    run = client.get_run(outcome[rl.name]["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.tags[EXPERIMENT_TAG] == str(rl.experiment_dir.resolve())
    assert "prefect.flow_run_id" in run.data.tags
    assert run.data.params["algorithm.algorithm_type"] == "grpo"
    for key in ("explore/reward_mean", "train/loss", "train/grad_norm", "time/explore_s", "time/train_s", "time/sync_s"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [1, 2], key
    # explorer.eval_on_startup: the model before training is evaluated at step 0, then at the end
    for metric in ("accuracy", "strict", "lenient", "format", "response_length"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, f"eval/gsm8k-eval/{metric}")] == [0, 2]
    # ... and that model is the warm-up's final one, evaluated with the same settings at the warm-up's end: that
    # evaluation is the baseline (its table is in the warm-up's run), not a second evaluation of the same weights
    assert outcome[rl.name]["eval_at_start"] == outcome[sft.name]["eval"]
    assert {"strict", "lenient", "format"} <= set(outcome[rl.name]["eval_at_start"]["gsm8k-eval"])
    assert {a.path for a in client.list_artifacts(run.info.run_id, "eval/gsm8k-eval")} == {"eval/gsm8k-eval/step_00002.json"}
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "reward_curve.png", "eval"} <= artifacts
    logged = json.loads(Path(client.download_artifacts(run.info.run_id, "config.json")).read_text())
    assert logged["name"] == rl.name
    assert run.data.tags["checkpoint.global_step_2"].endswith("global_step_2")
    (version,) = client.search_model_versions(f"name='{rl.project}-smoke-rft'")
    assert version.run_id == run.info.run_id and version.source.endswith("global_step_2/actor/huggingface")
    sft_run = client.get_run(outcome[sft.name]["mlflow_run_id"])
    assert [m.step for m in client.get_metric_history(sft_run.info.run_id, "train/loss")] == [1, 2]
    # the warm-up stage with eval tasksets: the base model at step 0, the warmed-up one after its last step
    assert [m.step for m in client.get_metric_history(sft_run.info.run_id, "eval/gsm8k-eval/strict")] == [0, 2]
    assert set(outcome[sft.name]["eval_at_start"]) == set(outcome[sft.name]["eval"]) == {"gsm8k-eval"}


def test_stages_are_runs_nested_under_one_experiment_run(staged_run: tuple[list[ExperimentConfig], dict]) -> None:
    (sft, rl), outcome = staged_run
    client = MlflowClient(tracking_uri=tracking_uri(rl))
    runs = [client.get_run(outcome[stage.name]["mlflow_run_id"]) for stage in (sft, rl)]
    parent_id = runs[0].data.tags[PARENT_TAG]
    assert runs[1].data.tags[PARENT_TAG] == parent_id
    parent = client.get_run(parent_id)
    whole = rl.experiment_dir.parent  # {root}/{project}/{name}: the experiment both stages belong to
    assert parent.info.run_name == whole.name and parent.info.status == "FINISHED"
    assert parent.data.tags[ROLE_TAG] == "experiment" and parent.data.tags[EXPERIMENT_TAG] == str(whole.resolve())
    parents = client.search_runs([parent.info.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'experiment'")
    assert [p.info.run_id for p in parents] == [parent_id]  # one per experiment, however many stages
    assert all(run.data.params["warnings"] == "none" for run in runs)  # the smoke stages ignore no setting
