"""Settings schemas: descriptions, presets, derived values, cross-field rules, stages, overrides, recipes."""

from __future__ import annotations

import re
import typing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import schemas
from deployments import RECIPES, UnknownRecipeError, load_recipe
from deployments.recipes.gsm8k import grpo_only
from schemas import (
    ConfigRuleError,
    ExperimentConfig,
    UnknownSettingError,
    describe_errors,
    parse_set_args,
)
from schemas.overrides import set_path
from workflows.math_workflow import DEFAULT_SYSTEM_PROMPT


def gsm8k_data() -> dict[str, Any]:
    """What the gsm8k recipe sets, as plain data (a valid starting point for broken variants)."""
    return load_recipe("gsm8k").user_data()


def _all_models() -> list[type[BaseModel]]:
    seen: dict[str, type[BaseModel]] = {}

    def visit(model: type[BaseModel]) -> None:
        if model.__name__ in seen:
            return
        seen[model.__name__] = model
        for field in model.model_fields.values():
            stack = [field.annotation]
            while stack:
                ann = stack.pop()
                if isinstance(ann, type) and issubclass(ann, BaseModel):
                    visit(ann)
                stack.extend(typing.get_args(ann))

    visit(ExperimentConfig)
    from schemas import algorithm_registry

    for registry in algorithm_registry.FUNCTION_REGISTRIES.values():
        for model in registry.values():
            visit(model)
    return list(seen.values())


# ----------------------------------------------------------------------------- structure
def test_every_model_forbids_unknown_keys_and_describes_every_field():
    models = _all_models()
    assert len(models) > 20
    for model in models:
        assert model.model_config.get("extra") == "forbid", model.__name__
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_package_reexports_every_section_model():
    for name in ("ExperimentConfig", "AlgorithmConfig", "OptimizerConfig", "ModelConfig", "TrinityTinkerConfig",
                 "LoRAConfig", "ClusterConfig", "BufferConfig", "TasksetConfig", "StorageConfig", "TaskFormat", "DataFormat",
                 "ExplorerConfig", "InferenceModelConfig", "VllmModelConfig", "TinkerSamplerConfig", "TrainerConfig",
                 "TorchTrainerConfig", "VerlTrainerConfig", "TinkerTrainerConfig",
                 "SynchronizerConfig", "MonitorConfig", "StageConfig", "parse_set_args"):
        assert hasattr(schemas, name), name


def test_contract_defaults():
    minimal = dict(project="p", name="n", model={"model_path": "m", "max_model_len": 64},
                   buffer={"explorer_input": {"taskset": {"path": "d", "default_workflow_type": "w"}}})
    # Trinity's defaults: algorithm ppo (GAE over a critic) on veRL, which trains the critic
    ppo = ExperimentConfig(**minimal)
    assert (ppo.algorithm.algorithm_type, ppo.algorithm.advantage_fn, ppo.trainer.trainer_type) == ("ppo", "ppo", "verl")
    c = ExperimentConfig(**minimal, algorithm={"algorithm_type": "grpo"})
    assert c.mode == "both" and c.group == "" and c.checkpoint_root_dir == "./checkpoints"
    assert c.monitor.monitor_type == "mlflow" and c.monitor.tracking_uri is None
    assert c.monitor.experiment_name == "p" and c.derived["monitor.experiment_name"] == "project"
    assert c.trainer.trainer_type == "verl"  # Trinity's default trainer
    assert c.explorer.rollout_model.engine_type == "vllm"
    assert c.model.max_prompt_tokens == 32 and c.model.max_response_tokens == 32


# ----------------------------------------------------------------------------- presets and derived values
def test_grpo_preset_fills_unset_functions_and_shows_them_as_derived():
    c = load_recipe("gsm8k")
    alg = c.algorithm
    assert (alg.policy_loss_fn, alg.advantage_fn, alg.kl_loss_fn, alg.entropy_loss_fn) == ("ppo", "grpo", "none", "default")
    assert c.derived["algorithm.advantage_fn"] == "preset of algorithm_type 'grpo'"
    assert "algorithm.kl_loss_fn" not in c.derived  # the recipe set it
    assert alg.policy_loss_fn_args == {
        "clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.2, "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean", "enable_sequence_masking": False, "delta_sequence_masking": 0.1,
    }
    assert c.derived["algorithm.policy_loss_fn_args.clip_range_low"] == "clip_range"
    assert alg.advantage_fn_args == {"epsilon": 1e-6, "std_threshold": None, "norm_adv_by_std_in_grpo": True}
    assert alg.kl_loss_fn_args == {"kl_coef": 0.0}


def test_user_set_function_is_kept_and_its_args_get_their_own_defaults():
    data = gsm8k_data()
    data["algorithm"]["policy_loss_fn"] = "gspo"
    data["algorithm"]["policy_loss_fn_args"] = {"clip_range_high": 0.001}
    c = ExperimentConfig.model_validate(data)
    assert c.algorithm.policy_loss_fn == "gspo"
    assert c.algorithm.policy_loss_fn_args["clip_range_high"] == 0.001
    assert c.algorithm.policy_loss_fn_args["clip_range_low"] == 0.0003
    assert "algorithm.policy_loss_fn_args.clip_range_high" not in c.derived
    assert c.derived["algorithm.policy_loss_fn_args.clip_range_low"] == "default of policy_loss_fn 'gspo'"


@pytest.mark.parametrize(
    ("algorithm_type", "expected"),
    [
        ("grpo", {"repeat_times": 2, "policy_loss_fn": "ppo", "advantage_fn": "grpo", "kl_loss_fn": "k2"}),
        ("rloo", {"repeat_times": 2, "policy_loss_fn": "ppo", "advantage_fn": "rloo"}),
        ("gspo", {"repeat_times": 2, "policy_loss_fn": "gspo", "advantage_fn": "grpo", "kl_loss_fn": "none"}),
        ("opmd", {"policy_loss_fn": "opmd", "advantage_fn": "opmd"}),
        ("reinforceplusplus", {"advantage_fn": "reinforceplusplus"}),
    ],
)
def test_presets_per_algorithm(algorithm_type, expected):
    data = gsm8k_data()
    data["algorithm"] = {"algorithm_type": algorithm_type}
    data["buffer"]["explorer_input"]["eval_tasksets"][0].pop("repeat_times", None)
    c = ExperimentConfig.model_validate(data)
    for key, value in expected.items():
        assert getattr(c.algorithm, key) == value, key
        assert c.derived[f"algorithm.{key}"] == f"preset of algorithm_type {algorithm_type!r}"
    assert c.buffer.train_batch_size == 2 * c.algorithm.repeat_times


def test_sft_preset_in_train_mode():
    c = ExperimentConfig(
        project="p", name="n", mode="train", algorithm={"algorithm_type": "sft"},
        model={"model_path": "m", "max_model_len": 128},
        buffer={"train_batch_size": 4, "trainer_input": {"experience_buffer": {"path": "data/sft"}}},
    )
    assert (c.algorithm.policy_loss_fn, c.algorithm.kl_loss_fn, c.algorithm.entropy_loss_fn) == ("sft", "none", "none")
    assert c.synchronizer.sync_method == "checkpoint"
    assert "mode 'train'" in c.derived["synchronizer.sync_method"]


def test_derived_values_round_trip_and_are_rederived():
    c = load_recipe("gsm8k")
    again = ExperimentConfig.model_validate_json(c.model_dump_json())
    assert again == c
    # A derived value is not mistaken for a user setting: change the algorithm, the preset follows.
    sft_like = c.with_overrides({"algorithm.algorithm_type": "gspo"})
    assert sft_like.algorithm.policy_loss_fn == "gspo"
    assert sft_like.algorithm.policy_loss_fn_args["loss_agg_mode"] == "seq-mean-token-mean"


def test_train_batch_size_is_derived_with_reason():
    c = load_recipe("gsm8k")
    assert c.buffer.train_batch_size == 16
    assert c.derived["buffer.train_batch_size"] == "buffer.batch_size (2) × algorithm.repeat_times (8)"


def test_default_nccl_on_cpu_is_derived_but_an_explicit_one_is_kept():
    data = gsm8k_data()
    data.pop("synchronizer")
    c = ExperimentConfig.model_validate(data)
    assert c.synchronizer.sync_method == "memory"
    assert "cluster.gpu_per_node is 0" in c.derived["synchronizer.sync_method"]
    data["synchronizer"] = {"sync_method": "nccl"}  # broadcast over gloo (backends/local/gloo_transfer.py)
    assert ExperimentConfig.model_validate(data).synchronizer.sync_method == "nccl"


def test_on_cpu_an_unsized_kv_cache_is_derived_but_an_asked_memory_share_is_kept():
    """vLLM's CPU build would reserve 90 % of the RAM and refuse to start beside anything else: a stage that replaces
    the explorer section (`--set stages.0.explorer.eval_on_startup=false`) lost the recipe's KV size that way."""
    stage = load_recipe("gsm8k").with_overrides({"stages.0.explorer.eval_on_startup": False}).resolve_stages()[0]
    assert stage.explorer.rollout_model.kv_cache_memory_gb == 2.0
    assert "cluster.gpu_per_node is 0" in stage.derived["explorer.rollout_model.kv_cache_memory_gb"]
    data = gsm8k_data()
    data["explorer"] = {"rollout_model": {"gpu_memory_utilization": 0.4},
                        "auxiliary_models": [{"model_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}]}
    asked = ExperimentConfig.model_validate(data).explorer
    assert asked.rollout_model.kv_cache_memory_gb is None and asked.auxiliary_models[0].gpu_memory_utilization == 0.4
    data["explorer"]["rollout_model"] = {}
    derived = ExperimentConfig.model_validate(data).explorer
    assert derived.rollout_model.kv_cache_memory_gb == derived.auxiliary_models[0].kv_cache_memory_gb == 2.0
    data["cluster"] = {"gpu_per_node": 8, "node_num": 1}  # on GPUs vLLM's own share stands
    data["synchronizer"]["sync_method"] = "nccl"  # the recipe's memory sync is CPU-only (CUDA IPC needs one GPU)
    assert ExperimentConfig.model_validate(data).explorer.rollout_model.kv_cache_memory_gb is None


def test_eval_interval_off_the_sync_interval_is_rounded_down_with_a_warning():
    """Trinity's rule (IntervalConfigValidator), kept on re-validation and re-adjusted by an override."""
    c = load_recipe("gsm8k").with_overrides({"synchronizer.sync_interval": 3})  # eval_interval 20
    assert c.explorer.eval_interval == 18 and c.derived["explorer.eval_interval"].startswith("adjusted: 20 rounded")
    assert any(w.startswith("explorer.eval_interval: 20 is not a multiple") for w in c.warnings)
    assert ExperimentConfig.model_validate(c.user_data()).explorer.eval_interval == 18
    assert c.with_overrides({"synchronizer.sync_interval": 4}).explorer.eval_interval == 16


def test_trinity_tinker_flag_is_one_backend_choice_and_warns_about_lora():
    data = load_recipe("gsm8k-tinker").user_data()
    trainer = data.pop("trainer")
    data["explorer"].pop("rollout_model")
    data["model"]["tinker"] = {"enable": True, "rank": trainer["rank"], "seed": 3}
    data["model"]["lora_configs"] = [{"lora_rank": 8}]
    c = ExperimentConfig.model_validate(data)
    assert c.trainer.trainer_type == "tinker" and c.explorer.rollout_model.engine_type == "tinker"
    assert (c.trainer.rank, c.trainer.seed) == (32, 3)
    assert c.derived["trainer.trainer_type"] == "alias: model.tinker.enable is true"
    assert c.trainer.base_model == "meta-llama/Llama-3.2-3B" and c.derived["trainer.base_model"] == "model.model_path"
    assert any("model.lora_configs is ignored" in w for w in c.warnings)
    again = c.with_overrides({"trainer.rank": 8})  # the mapped choice survives re-validation
    assert (again.trainer.trainer_type, again.trainer.rank, again.explorer.rollout_model.engine_type) == ("tinker", 8, "tinker")


def test_backend_choice_by_override_drops_the_other_backends_settings():
    smoke = load_recipe("smoke")
    verl = smoke.with_overrides({"trainer.trainer_type": "verl"})
    assert verl.trainer.trainer_type == "verl" and verl.trainer.micro_batch_size == smoke.trainer.micro_batch_size
    assert verl.derived["trainer.dtype"] == "alias: dropped: not a setting of trainer_type 'verl'"
    tinker = smoke.with_overrides({"model.tinker.enable": True, "model.tinker.rank": 4, "synchronizer.sync_method": "checkpoint"})
    assert (tinker.trainer.trainer_type, tinker.trainer.rank, tinker.explorer.rollout_model.engine_type) == ("tinker", 4, "tinker")
    assert "explorer.rollout_model.kv_cache_memory_gb" in tinker.derived
    with pytest.raises(ValidationError) as refused:  # a setting of another backend is refused
        ExperimentConfig.model_validate({**verl.user_data(), "trainer": {"trainer_type": "verl", "dtype": "float32"}})
    assert describe_errors(refused.value) == ["trainer.dtype: not a setting of trainer_type 'verl'"]
    with pytest.raises(UnknownSettingError, match="trainer has no field 'precision'"):
        smoke.with_overrides({"trainer.precision": "fp8"})


def test_trinity_aliases_in_the_schema():
    data = gsm8k_data()
    data["algorithm"]["optimizer"] = {"lr": 1e-5, "warmup_style": "cosine"}
    data["synchronizer"] = {"sync_method": "offline", "sync_style": "dynamic_by_trainer"}
    c = ExperimentConfig.model_validate(data)
    assert c.algorithm.optimizer.lr_scheduler_type == "cosine"
    assert (c.synchronizer.sync_method, c.synchronizer.sync_style) == ("checkpoint", "trainer_driven")


def test_a_task_set_and_a_dataset_have_only_their_own_settings_and_refuse_the_others_with_why():
    """A task set's and a dataset's settings differ (TaskFormat, DataFormat; a StorageConfig has no rollout
    settings): a key of the other kind is refused at its path with why (Section.NOT_HERE), from a file as from --set."""
    data = gsm8k_data()
    data["buffer"]["explorer_input"]["taskset"]["format"]["chosen_key"] = "good"
    data["buffer"]["trainer_input"] = {"experience_buffer": {"path": "data/x", "task_selector": {"seed": 1}}}
    with pytest.raises(ValidationError) as exc:
        ExperimentConfig.model_validate(data)
    found = dict(schemas.error_items(exc.value))
    assert "preference pairs are read from" in found["buffer.explorer_input.taskset.format.chosen_key"]
    assert found["buffer.trainer_input.experience_buffer.task_selector"] == "SFT rows are read in file order, batch after batch"
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({"buffer.trainer_input.experience_buffer.format.workflow_key": "kind"})
    assert dict(schemas.error_items(exc.value)) == {
        "buffer.trainer_input.experience_buffer.format.workflow_key": "a trainer input is not rolled out as tasks: the "
                                                                      "setting has no effect"}
    assert "rollout_args" not in schemas.StorageConfig.model_fields and "messages_key" not in schemas.TaskFormat.model_fields


# ----------------------------------------------------------------------------- malformed configs
def _drop(path: str):
    def edit(data):
        *parents, last = path.split(".")
        node = data
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node.pop(last)
    return edit


def _set(**values):
    def edit(data):
        for path, value in values.items():
            set_path(data, path.replace("__", "."), value)
    return edit


def _both(*edits):
    def edit(data):
        for one in edits:
            one(data)
    return edit


TINKER = {"model__tinker": {"enable": True}, "synchronizer__sync_method": "checkpoint",
          "trainer": {"trainer_type": "tinker"}, "explorer__rollout_model": {"engine_type": "tinker"}}
TINKER_OURS = {k: v for k, v in TINKER.items() if k != "model__tinker"}

MALFORMED = [
    # wrong types
    ("lr-not-a-number", _set(algorithm__optimizer__lr="fast"), "algorithm.optimizer.lr"),
    ("batch-size-text", _set(buffer__batch_size="two"), "buffer.batch_size"),
    ("batch-size-zero", _set(buffer__batch_size=0), "buffer.batch_size"),
    ("enforce-eager-text", _set(explorer__rollout_model__enforce_eager="maybe"), "explorer.rollout_model.enforce_eager"),
    ("eval-tasksets-not-list", _set(buffer__explorer_input__eval_tasksets={"path": "x"}), "buffer.explorer_input.eval_tasksets"),
    ("gpu-mem-too-high", _set(explorer__rollout_model__gpu_memory_utilization=1.5), "explorer.rollout_model.gpu_memory_utilization"),
    ("kv-cache-negative", _set(explorer__rollout_model__kv_cache_memory_gb=-1), "explorer.rollout_model.kv_cache_memory_gb"),
    ("top-p-zero", _set(buffer__explorer_input__taskset__rollout_args__top_p=0), "buffer.explorer_input.taskset.rollout_args.top_p"),
    ("sync-interval-zero", _set(synchronizer__sync_interval=0), "synchronizer.sync_interval"),
    ("sync-offset-negative", _set(synchronizer__sync_offset=-1), "synchronizer.sync_offset"),
    # unknown keys
    ("unknown-top-level", _set(epochs=3), "epochs"),
    ("unknown-optimizer-key", _set(algorithm__optimizer__lrr=1e-5), "algorithm.optimizer.lrr"),
    ("unknown-taskset-key", _set(buffer__explorer_input__taskset__promt_key="q"), "buffer.explorer_input.taskset.promt_key"),
    ("unknown-eval-key", _set(buffer__explorer_input__eval_tasksets__0__splitt="test"), "buffer.explorer_input.eval_tasksets.0.splitt"),
    ("unknown-torch-key", _set(trainer__precision="fp8"), "trainer.precision"),
    ("other-backends-key", _set(trainer__trainer_config={"a": 1}), "trainer.trainer_config"),
    ("vllm-key-on-tinker", _set(explorer__rollout_model={"engine_type": "tinker", "tensor_parallel_size": 2}),
     "explorer.rollout_model.tensor_parallel_size"),
    ("endpoint-key-on-tinker", _set(**{**TINKER_OURS, "explorer__rollout_model": {"engine_type": "tinker",
                                                                                   "enable_openai_api": True}}),
     "explorer.rollout_model.enable_openai_api"),
    ("serve-on-tinker", _set(**TINKER_OURS, mode="serve"), "explorer.rollout_model.engine_type"),
    ("unknown-policy-arg", _set(algorithm__policy_loss_fn_args={"clip_rang": 0.1}), "algorithm.policy_loss_fn_args.clip_rang"),
    ("unknown-advantage-arg", _set(algorithm__advantage_fn_args={"epsilonn": 1.0}), "algorithm.advantage_fn_args.epsilonn"),
    # bad enums / names
    ("bad-mode", _set(mode="fast"), "mode"),
    ("bad-sync-method", _set(synchronizer__sync_method="rsync"), "synchronizer.sync_method"),
    # CUDA IPC needs the engine on the trainer's GPU; mode both gives each its own (issue 70, failure 2)
    ("memory-sync-on-gpus", _set(cluster__gpu_per_node=2, synchronizer__sync_method="memory"), "synchronizer.sync_method"),
    ("bad-trainer-type", _set(trainer__trainer_type="jax"), "trainer.trainer_type"),
    ("bad-dtype", _set(explorer__rollout_model__dtype="int4"), "explorer.rollout_model.dtype"),
    ("bad-storage-type", _set(buffer__explorer_input__taskset__storage_type="s3"), "buffer.explorer_input.taskset.storage_type"),
    ("bad-scheduler", _set(algorithm__optimizer__lr_scheduler_type="linear"), "algorithm.optimizer.lr_scheduler_type"),
    ("bad-algorithm", _set(algorithm__algorithm_type="ppoo"), "algorithm.algorithm_type"),
    ("bad-policy-loss", _set(algorithm__policy_loss_fn="clip"), "algorithm.policy_loss_fn"),
    ("bad-loss-agg-mode", _set(algorithm__policy_loss_fn_args={"loss_agg_mode": "mean"}), "algorithm.policy_loss_fn_args.loss_agg_mode"),
    ("bad-monitor", _set(monitor__monitor_type="swanlab"), "monitor.monitor_type"),
    # contradictory settings
    ("kl-coef-without-kl", _set(algorithm__kl_loss_fn_args={"kl_coef": 0.1}), "algorithm.kl_loss_fn_args.kl_coef"),
    ("adaptive-kl-no-target", _set(algorithm__kl_loss_fn="k2", algorithm__kl_loss_fn_args={"adaptive": True}), "algorithm.kl_loss_fn_args.adaptive"),
    ("entropy-coef-without-entropy", _set(algorithm__entropy_loss_fn="none", algorithm__entropy_loss_fn_args={"entropy_coef": 0.01}), "algorithm.entropy_loss_fn_args.entropy_coef"),
    ("grpo-single-response", _set(algorithm__repeat_times=1), "algorithm.repeat_times"),
    ("batch-not-whole-groups", _set(buffer__train_batch_size=15), "buffer.train_batch_size"),
    ("lengths-exceed-context", _set(model__max_model_len=300), "model.max_model_len"),
    ("no-model-path", _set(model__model_path=None), "model.model_path"),
    ("two-lora-adapters", _set(model__lora_configs=[{}, {}]), "model.lora_configs"),
    ("min-response-too-long", _set(model__min_response_tokens=500), "model.min_response_tokens"),
    ("tinker-flag-with-torch-trainer", _set(model__tinker={"enable": True}, synchronizer__sync_method="checkpoint"), "trainer.trainer_type"),
    ("tinker-flag-bad-rank", _set(model__tinker={"enable": True, "rank": 0}), "model.tinker.rank"),
    ("tinker-with-critic", _set(**TINKER, algorithm__algorithm_type="ppo"), "algorithm.algorithm_type"),
    ("tinker-with-gae", _set(**TINKER, algorithm__advantage_fn="ppo"), "algorithm.advantage_fn"),
    ("tinker-with-unbuilt-loss", _set(**TINKER, algorithm__policy_loss_fn="mix"), "algorithm.policy_loss_fn"),
    ("tinker-with-entropy", _set(**TINKER, algorithm__entropy_loss_fn="default",
                                 algorithm__entropy_loss_fn_args={"entropy_coef": 0.01}), "algorithm.entropy_loss_fn_args.entropy_coef"),
    ("tinker-with-another-reference", _set(**TINKER, model__ref_model_path="HuggingFaceTB/SmolLM2-135M-Instruct"),
     "model.ref_model_path"),  # a KL term runs: its reference is the stage's starting weights
    # our spelling (Trinity's model.tinker flag maps these to checkpoint, as Trinity runs them)
    ("tinker-with-memory-sync", _set(**{**TINKER_OURS, "synchronizer__sync_method": "memory"}), "synchronizer.sync_method"),
    ("tinker-with-nccl-sync", _set(**{**TINKER_OURS, "synchronizer__sync_method": "nccl"}), "synchronizer.sync_method"),
    ("tinker-bench", _set(**TINKER, mode="bench"), "mode"),
    ("tinker-loss-fn-mismatch", _set(**{**TINKER, "trainer": {"trainer_type": "tinker", "loss_fn": "cispo"}}), "trainer.loss_fn"),
    ("tinker-trainer-with-vllm", _set(trainer={"trainer_type": "tinker"}, synchronizer__sync_method="checkpoint"), "explorer.rollout_model.engine_type"),
    ("tinker-sampler-with-torch", _set(explorer__rollout_model={"engine_type": "tinker"}), "explorer.rollout_model.engine_type"),
    ("nccl-with-lora", _set(cluster__gpu_per_node=4, synchronizer__sync_method="nccl", model__lora_configs=[{}]), "synchronizer.sync_method"),
    ("memory-sync-multi-node", _set(cluster__node_num=2), "synchronizer.sync_method"),
    ("sync-interval-beyond-run", _set(synchronizer__sync_interval=50), "synchronizer.sync_interval"),
    ("sync-offset-beyond-run", _set(synchronizer__sync_offset=40), "synchronizer.sync_offset"),
    ("sync-offset-dynamic-style", _set(synchronizer__sync_offset=1, synchronizer__sync_style="explorer_driven"), "synchronizer.sync_offset"),
    ("eval-taskset-without-workflow", _drop("buffer.explorer_input.eval_tasksets.0.default_workflow_type"), "buffer.explorer_input.eval_tasksets.0.default_workflow_type"),
    ("eval-taskset-without-path", _drop("buffer.explorer_input.eval_tasksets.0.path"), "buffer.explorer_input.eval_tasksets.0.path"),
    ("eval-max-tokens-too-long", _set(buffer__explorer_input__eval_tasksets__0__rollout_args__max_tokens=500), "buffer.explorer_input.eval_tasksets.0.rollout_args.max_tokens"),
    ("no-taskset-in-both", _drop("buffer.explorer_input.taskset"), "buffer.explorer_input.taskset"),
    ("taskset-repeat-mismatch", _set(buffer__explorer_input__taskset__repeat_times=4), "buffer.explorer_input.taskset.repeat_times"),
    ("taskset-from-queue", _set(buffer__explorer_input__taskset__storage_type="queue"), "buffer.explorer_input.taskset.storage_type"),
    ("file-experience-buffer-in-both", _set(buffer__trainer_input__experience_buffer={"storage_type": "file", "path": "x"}), "buffer.trainer_input.experience_buffer.storage_type"),
    ("sft-without-batch", _both(_set(mode="train", algorithm__algorithm_type="sft"), _drop("buffer.batch_size")),
     "buffer.train_batch_size"),
    ("colocate-verl-on-gpus", _set(mode="colocate", cluster__gpu_per_node=2, trainer={"trainer_type": "verl"}),
     "trainer.trainer_type"),
    ("colocate-two-engines-on-gpus", _set(mode="colocate", cluster__gpu_per_node=2, explorer__rollout_model__engine_num=2),
     "explorer.rollout_model.engine_num"),
    ("colocate-overlapping", _set(mode="colocate", synchronizer__sync_offset=1), "synchronizer.sync_offset"),
    ("bench-without-eval", _set(mode="bench", buffer__explorer_input__eval_tasksets=[]), "buffer.explorer_input.eval_tasksets"),
    ("staleness-below-schedule", _set(synchronizer__sync_offset=1, algorithm__sample_strategy_args={"max_staleness": 0}),
     "algorithm.sample_strategy_args.max_staleness"),
    ("train-mode-without-data", _set(mode="train", algorithm__algorithm_type="sft", buffer__train_batch_size=8), "buffer.trainer_input.experience_buffer"),
    ("dpo-in-both", _set(algorithm__algorithm_type="dpo", buffer__train_batch_size=8), "mode"),
    ("gpus-all-taken-by-engines", _set(cluster__gpu_per_node=1, synchronizer__sync_method="checkpoint"), "explorer.rollout_model.engine_num"),
    ("aux-model-without-path", _set(explorer__auxiliary_models=[{"engine_num": 1}]), "explorer.auxiliary_models.0.model_path"),
    ("rollout-model-path-set", _set(explorer__rollout_model__model_path="other"), "explorer.rollout_model.model_path"),
    ("warmup-style-conflict", _set(algorithm__optimizer__warmup_style="cosine", algorithm__optimizer__lr_scheduler_type="constant"), "algorithm.optimizer"),
    # bad stage overrides
    ("stage-unknown-arg", _set(stages=[{"stage_name": "a", "algorithm": {"algorithm_type": "grpo", "policy_loss_fn_args": {"clip_rang": 1}}}]), "stages.0.algorithm.policy_loss_fn_args.clip_rang"),
    ("stage-unknown-section", _set(stages=[{"stage_name": "a", "optimizer": {"lr": 1.0}}]), "stages.0.optimizer"),
    ("stage-bad-mode", _set(stages=[{"stage_name": "a", "mode": "sft"}]), "stages.0.mode"),
    ("stage-without-name", _set(stages=[{"mode": "train"}]), "stages.0.stage_name"),
    ("stage-name-with-slash", _set(stages=[{"stage_name": "a/b"}]), "stages.0.stage_name"),
    ("stage-train-without-batch", _set(stages=[{"stage_name": "sft", "mode": "train", "algorithm": {"algorithm_type": "sft"},
                                                "buffer": {"total_steps": 2}}, {"stage_name": "rft"}]), "stages.0.buffer.train_batch_size"),
    ("stage-bad-type", _set(stages=[{"stage_name": "a", "buffer": {"batch_size": "many"}}]), "stages.0.buffer.batch_size"),
    ("stage-section-replaced-loses-taskset", _set(stages=[{"stage_name": "a", "buffer": {"batch_size": 2}}]), "stages.0.buffer.explorer_input.taskset"),
]


@pytest.mark.parametrize(("case", "edit", "path"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_config_names_the_offending_field(case, edit, path):
    data = gsm8k_data()
    edit(data)
    with pytest.raises(ValidationError) as info:
        ExperimentConfig.model_validate(data)
    lines = describe_errors(info.value)
    assert any(line.startswith(f"{path}:") or line.startswith(f"{path}.") for line in lines), lines
    # the plain pydantic message names it too (inside a backend's section, with the backend: trainer.torch.dtype)
    raw = re.sub(r"(?<=trainer)\.(torch|verl|tinker)|(?<=rollout_model)\.(vllm|tinker)", "", str(info.value))
    assert path in raw or path.rsplit(".", 1)[0] in raw


def test_at_least_40_distinct_malformed_cases():
    assert len({c[0] for c in MALFORMED}) == len(MALFORMED) >= 40


def test_all_problems_are_reported_at_once():
    data = gsm8k_data()
    _set(synchronizer__sync_interval=50, model__max_model_len=300)(data)
    with pytest.raises(ValidationError) as info:
        ExperimentConfig.model_validate(data)
    paths = [line.split(":")[0] for line in describe_errors(info.value)]
    assert "model.max_model_len" in paths and "synchronizer.sync_interval" in paths


@pytest.mark.parametrize("overrides", [
    {"algorithm.algorithm_type": "grpo"},
    {"algorithm.algorithm_type": "grpo", "algorithm.advantage_fn_args": {"norm_adv_by_std_in_grpo": False},
     "algorithm.policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-sum-norm"}},  # Dr. GRPO
    {"algorithm.algorithm_type": "rloo"},
    {"algorithm.algorithm_type": "reinforceplusplus"},
    {"algorithm.algorithm_type": "opmd"},
    {"algorithm.algorithm_type": "cispo"},
    {"algorithm.algorithm_type": "gspo"},
    {"mode": "train", "algorithm.algorithm_type": "sft", "buffer.train_batch_size": 8,
     "buffer.trainer_input.experience_buffer": {"path": "data/gsm8k", "format": {"prompt_type": "plaintext",
                                                "prompt_key": "question", "response_key": "answer"}}},
], ids=["grpo", "dr-grpo", "rloo", "reinforceplusplus", "opmd", "cispo", "gspo", "sft"])
def test_outcome_advantage_algorithms_run_on_tinker(overrides: dict[str, Any]) -> None:
    """Advantages are computed outside the trainer, so Trinity's Tinker refusals (rloo, reinforce++) do
    not apply; a preset's default KL term is switched off on Tinker (it would cost a reference sampler), shown in derived."""
    data = load_recipe("gsm8k-tinker").user_data()
    data["algorithm"] = {"algorithm_type": "grpo", "repeat_times": 8}  # the presets' own KL settings
    config = ExperimentConfig.model_validate(data).with_overrides(overrides)
    assert config.trainer.trainer_type == "tinker"
    if config.algorithm.kl_loss_fn != "none":
        assert config.algorithm.kl_loss_fn_args["kl_coef"] == 0.0
    elif config.algorithm.algorithm_type not in ("sft", "gspo"):  # their presets have no KL term
        assert "preset's KL term is off" in config.derived["algorithm.kl_loss_fn"]


def test_switching_to_tinker_drops_local_weight_settings() -> None:
    """smoke and hello set sync_method memory (and hello a LoRA) for the local backend; switched to Tinker
    those do not apply: dropped, noted in derived, the LoRA rank carried to trainer.rank."""
    smoke = load_recipe("smoke").with_overrides({"model.tinker.enable": True})
    assert smoke.synchronizer.sync_method == "checkpoint"
    assert "'memory' dropped" in smoke.derived["synchronizer.sync_method"]
    hello = load_recipe("hello").with_overrides({"model.tinker.enable": True})
    assert hello.model.lora_configs is None and hello.trainer.rank == 16 and hello.warnings == []
    assert hello.with_overrides({"buffer.total_steps": 3}).trainer.rank == 16  # survives re-validation


def _tinker_stages(**rl_stage: Any) -> dict[str, Any]:
    data = load_recipe("gsm8k-tinker").user_data()
    data["stages"] = [
        {"stage_name": "sft", "mode": "train", "algorithm": {"algorithm_type": "sft"},
         "buffer": {"batch_size": 4, "train_batch_size": 4, "total_steps": 2, "trainer_input": {
             "experience_buffer": {"path": "data/gsm8k", "format": {"prompt_type": "plaintext", "prompt_key": "question",
                                                                   "response_key": "answer"}}}}},
        {"stage_name": "grpo", **rl_stage},
    ]
    return data


def test_tinker_stages_chain_through_the_tinker_state() -> None:
    sft, rl = ExperimentConfig.model_validate(_tinker_stages()).resolve_stages()
    assert Path(rl.model.model_path) == sft.final_model_dir
    assert rl.trainer.base_model == sft.trainer.base_model == "meta-llama/Llama-3.2-3B"
    assert rl.derived["trainer.base_model"].startswith("stage chaining: ")


def test_tinker_stage_after_a_torch_stage_is_refused() -> None:
    data = _tinker_stages(trainer={"trainer_type": "torch"}, explorer={"rollout_model": {"engine_type": "vllm"}})
    with pytest.raises(ValidationError, match=r"stages\.1\.trainer\.trainer_type: .*cannot continue from stage 'sft'"):
        ExperimentConfig.model_validate(data)


# ----------------------------------------------------------------------------- stages
def test_no_stages_resolves_to_the_config_itself():
    c = load_recipe("smoke")
    (only,) = c.resolve_stages()
    assert only == c and only is not c


def _sft_then_rft(**rft_stage: Any) -> ExperimentConfig:
    data = gsm8k_data()
    data["buffer"]["batch_size"] = 4
    data["stages"] = [
        {"stage_name": "sft_warmup", "mode": "train", "algorithm": {"algorithm_type": "sft"},
         "buffer": {"train_batch_size": 8, "total_steps": 3,
                    "trainer_input": {"experience_buffer": {"name": "sft", "path": "data/sft"}}}},
        {"stage_name": "rft", **rft_stage},
    ]
    return ExperimentConfig.model_validate(data)


def test_stage_replaces_whole_sections_and_chains_the_model():
    sft, rft = _sft_then_rft().resolve_stages()
    assert sft.name == "gsm8k/sft_warmup" and rft.name == "gsm8k/rft"
    assert sft.experiment_dir.as_posix().endswith("checkpoints/rft/gsm8k/sft_warmup")
    # The stage's buffer replaced the base buffer entirely: unset fields are schema defaults.
    assert sft.buffer.batch_size == 1 and sft.buffer.explorer_input.taskset is None
    assert sft.mode == "train" and sft.algorithm.policy_loss_fn == "sft"
    assert sft.model.model_path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    # An empty stage is the base config, starting from the previous stage's final model.
    assert rft.mode == "both" and rft.buffer.batch_size == 4 and rft.algorithm.algorithm_type == "grpo"
    assert rft.model.model_path == str(sft.final_model_dir)
    assert rft.model.model_path.endswith("checkpoints/rft/gsm8k/sft_warmup/final/huggingface")
    assert rft.derived["model.model_path"] == "stage chaining: final model of stage 'sft_warmup'"
    assert rft.model.max_prompt_tokens == 256  # rest of the model section is the base's
    assert rft.stages == [] and sft.stages == []


def test_stage_config_survives_a_json_round_trip():
    _, rft = _sft_then_rft().resolve_stages()
    again = ExperimentConfig.model_validate_json(rft.model_dump_json())
    assert again.model.model_path == rft.model.model_path
    assert again == rft


def test_stage_naming_its_own_model_path_keeps_it():
    _, rft = _sft_then_rft(model={"model_path": "my/model", "max_model_len": 512}).resolve_stages()
    assert rft.model.model_path == "my/model" and "model.model_path" not in rft.derived
    assert rft.model.max_prompt_tokens is not None and rft.model.max_model_len == 512


def test_stage_after_a_non_training_stage_keeps_the_base_model():
    data = gsm8k_data()
    data["stages"] = [{"stage_name": "baseline", "mode": "bench"}, {"stage_name": "rft"}]
    bench, rft = ExperimentConfig.model_validate(data).resolve_stages()
    assert bench.mode == "bench" and rft.model.model_path == "HuggingFaceTB/SmolLM2-135M-Instruct"


# ----------------------------------------------------------------------------- overrides
def test_with_overrides_sets_nested_values_and_revalidates():
    c = load_recipe("gsm8k")
    o = c.with_overrides({"algorithm.optimizer.lr": 2e-6, "buffer.total_steps": 3,
                          "buffer.explorer_input.eval_tasksets.0.split": "test[:8]",
                          "algorithm.policy_loss_fn_args.clip_range": 0.1})
    assert o.algorithm.optimizer.lr == 2e-6 and o.buffer.total_steps == 3
    assert o.buffer.explorer_input.eval_tasksets[0].split == "test[:8]"
    assert o.algorithm.policy_loss_fn_args["clip_range_low"] == 0.1  # re-derived from the new clip_range
    assert c.algorithm.optimizer.lr == 5e-6  # the original is untouched
    derived_over = c.with_overrides({"buffer.train_batch_size": 8})
    assert derived_over.buffer.train_batch_size == 8 and "buffer.train_batch_size" not in derived_over.derived


@pytest.mark.parametrize("path", ["algorithm.optimizer.lrr", "buffer.explorer_input.taskset.nope.x",
                                  "model.model_path.x", "derived.x", "nonexistent"])
def test_with_overrides_unknown_path_is_named(path):
    with pytest.raises(UnknownSettingError, match=path.split(".x")[0] if path != "derived.x" else "derived"):
        load_recipe("gsm8k").with_overrides({path: 1})


def test_with_overrides_invalid_value_fails_validation():
    with pytest.raises(ValidationError, match="buffer.batch_size"):
        load_recipe("gsm8k").with_overrides({"buffer.batch_size": -1})


def test_parse_set_args():
    assert parse_set_args([
        "algorithm.optimizer.lr=2e-6", "buffer.total_steps=3", "model.model_path=Qwen/Qwen2.5-0.5B",
        "explorer.rollout_model.enforce_eager=true", "monitor.tracking_uri=null", "x.y=[1, 2]",
        "name=a=b", "model.custom_chat_template={{ messages }}",
    ]) == {
        "algorithm.optimizer.lr": 2e-6, "buffer.total_steps": 3, "model.model_path": "Qwen/Qwen2.5-0.5B",
        "explorer.rollout_model.enforce_eager": True, "monitor.tracking_uri": None, "x.y": [1, 2],
        "name": "a=b", "model.custom_chat_template": "{{ messages }}",
    }
    with pytest.raises(ValueError, match="PATH=VALUE"):
        parse_set_args(["algorithm.optimizer.lr"])


def test_experiment_dir():
    c = load_recipe("gsm8k").with_overrides({"checkpoint_root_dir": "/tmp/ck"})
    assert c.experiment_dir.as_posix() == "/tmp/ck/rft/gsm8k"


# ----------------------------------------------------------------------------- recipes
@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_validates(name):
    c = load_recipe(name)
    assert isinstance(c, ExperimentConfig) and c.name == name
    assert c.resolve_stages()
    assert ExperimentConfig.model_validate_json(c.model_dump_json()) == c


def test_gsm8k_recipe_values():
    c = load_recipe("gsm8k")
    assert c.model.model_path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert (c.model.max_prompt_tokens, c.model.max_response_tokens) == (256, 128)
    assert (c.algorithm.algorithm_type, c.algorithm.repeat_times, c.algorithm.optimizer.lr) == ("grpo", 8, 5e-6)
    assert c.algorithm.kl_loss_fn == "none" and c.algorithm.kl_loss_fn_args["kl_coef"] == 0
    assert (c.buffer.batch_size, c.buffer.total_steps) == (2, 20)
    ts, (ev,) = c.buffer.explorer_input.taskset, c.buffer.explorer_input.eval_tasksets
    assert (ts.path, ts.split, ev.split, ev.rollout_args.temperature, ev.repeat_times) == ("data/gsm8k", "train", "test[:400]", 0.0, 1)
    # Sampled and judged with the calculator, the warm-up's evaluation too.
    assert ts.default_workflow_type == ev.default_workflow_type == "math_calculator_workflow"
    rm = c.explorer.rollout_model
    assert (c.explorer.eval_interval, rm.engine_num, rm.enforce_eager, rm.kv_cache_memory_gb) == (20, 1, True, 2.0)
    assert (rm.dtype, rm.enable_prefix_caching) == ("float32", True)
    assert (c.trainer.trainer_type, c.trainer.dtype, c.trainer.device) == ("torch", "float32", "auto")
    assert (c.trainer.micro_batch_size, c.trainer.save_interval) == (8, 20)
    s = c.synchronizer
    assert (s.sync_method, s.sync_interval, s.sync_offset) == ("memory", 1, 0)
    assert (c.monitor.monitor_type, c.cluster.gpu_per_node, c.checkpoint_root_dir, c.project) == ("mlflow", 0, "./checkpoints", "rft")
    # The warm-up: the worked solutions under the RL prompt's system prompt, judged on the same held-out problems.
    sft, grpo = c.resolve_stages()
    rows = sft.buffer.trainer_input.experience_buffer
    assert (sft.mode, sft.algorithm.algorithm_type, sft.buffer.total_steps, sft.buffer.train_batch_size) == ("train", "sft", 80, 8)
    assert (rows.path, rows.format.response_key) == ("data/gsm8k-worked", "solution")
    assert rows.format.system_prompt == DEFAULT_SYSTEM_PROMPT and ts.format.system_prompt is None
    assert sft.buffer.explorer_input.eval_tasksets[0].default_workflow_type == "math_calculator_workflow"
    assert sft.buffer.explorer_input.eval_tasksets == c.buffer.explorer_input.eval_tasksets
    assert grpo.model.model_path == str(sft.final_model_dir)
    # smoke, q20 and gsm8k-tools start from GRPO alone (the recipe before its warm-up).
    assert load_recipe("smoke").stages == [] and grpo_only.algorithm.optimizer.lr == 3e-5


def test_smoke_recipe_values():
    c = load_recipe("smoke")
    assert (c.buffer.total_steps, c.buffer.batch_size, c.algorithm.repeat_times, c.model.max_response_tokens) == (2, 2, 2, 32)
    assert c.buffer.explorer_input.eval_tasksets[0].split == "test[:4]"
    assert (c.explorer.eval_interval, c.trainer.save_interval, c.name) == (2, 1, "smoke")
    assert c.model.max_model_len == 256 + 32  # re-derived, not inherited from gsm8k


@pytest.mark.parametrize("name", ["gsm8k-tinker", "gsm8k-verl-lora"])
def test_llama_recipes(name):
    c = load_recipe(name)
    assert c.model.model_path.startswith("meta-llama/Llama-3.2-3B")
    assert (c.algorithm.algorithm_type, c.algorithm.repeat_times, c.buffer.batch_size, c.algorithm.optimizer.lr) == ("grpo", 8, 96, 1e-5)
    assert c.algorithm.kl_loss_fn_args["kl_coef"] == 0
    rank = c.trainer.rank if c.trainer.trainer_type == "tinker" else c.model.lora_configs[0].lora_rank
    assert rank == 32
    s = c.synchronizer
    assert (s.sync_method, s.sync_interval, s.sync_offset) == ("checkpoint", 1, 1)


def test_load_recipe_unknown_name_lists_known_ones():
    with pytest.raises(UnknownRecipeError, match="gsm8k-qwen"):
        load_recipe("gsm8k_qwen")


def test_recipes_are_copies():
    a = load_recipe("gsm8k")
    a.buffer.batch_size = 99
    assert load_recipe("gsm8k").buffer.batch_size == 2


# ----------------------------------------------------------------------------- Prefect form
def test_prefect_parameter_schema_shows_sections_with_descriptions(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    from prefect import flow
    from prefect.utilities.callables import parameter_schema

    @flow
    def rft(config: ExperimentConfig, overrides: dict[str, Any] | None = None) -> None:
        """Tiny flow for the schema test."""

    schema = parameter_schema(rft.fn).model_dump()
    assert schema["properties"]["config"]["$ref"].endswith("/ExperimentConfig")
    definitions = schema["definitions"]
    props = definitions["ExperimentConfig"]["properties"]
    for section in ("algorithm", "model", "cluster", "buffer", "explorer", "trainer", "synchronizer", "monitor", "stages"):
        assert props[section]["description"], section
    assert "Peak learning rate" in definitions["OptimizerConfig"]["properties"]["lr"]["description"]
    assert definitions["TasksetConfig"]["properties"]["split"]["description"]
    assert definitions["SynchronizerConfig"]["properties"]["sync_method"]["enum"] == ["nccl", "checkpoint", "memory"]
    # The UI form validates what it posts: a dump of a recipe is a valid value of that parameter.
    ExperimentConfig.model_validate(load_recipe("gsm8k").model_dump(mode="json"))
    assert ConfigRuleError  # re-exported for flows that catch rule errors


def test_colocate_on_cpu_is_the_in_turns_plan_of_mode_both() -> None:
    """Explorer and trainer share the CPU, taking turns: the same flow and schedule as mode both with sync_offset 0."""
    from backends.schedule import Schedule
    from flows.rft import MODE_FLOWS

    both, colocate = load_recipe("smoke"), load_recipe("smoke").with_overrides({"mode": "colocate"})
    assert replace(Schedule.of(colocate), shares_devices=False) == Schedule.of(both) and Schedule.of(colocate).offset == 0
    assert Schedule.of(colocate).shares_devices and not Schedule.of(both).shares_devices
    assert MODE_FLOWS["colocate"] is MODE_FLOWS["both"]


def test_one_gpu_runs_colocate_the_engine_sleeping_while_the_trainer_steps() -> None:
    """One workstation GPU: mode both needs two (and says to colocate); colocate shares it, the engine's memory share
    derived to leave the trainer the rest, and the memory sync (CUDA IPC) allowed on the one shared device."""
    from backends.local.policy import SHARED_GPU, plan_resources
    from schemas.rules import COLOCATED_ENGINE_MEMORY

    one_gpu = {"cluster.gpu_per_node": 1, "cluster.node_num": 1}
    with pytest.raises(ValidationError, match="on one GPU use mode 'colocate'"):
        load_recipe("smoke").with_overrides(one_gpu)
    config = load_recipe("smoke").with_overrides({**one_gpu, "mode": "colocate", "synchronizer.sync_method": "memory"})
    assert config.explorer.rollout_model.gpu_memory_utilization == COLOCATED_ENGINE_MEMORY
    assert "the trainer holds the rest" in config.derived["explorer.rollout_model.gpu_memory_utilization"]
    plan = plan_resources(config, {"GPU": 1.0}, cores=8)
    assert plan.shares_gpu and (plan.engine_gpus, plan.trainer_actor_gpus) == (SHARED_GPU, SHARED_GPU)
    asked = load_recipe("smoke").with_overrides({**one_gpu, "mode": "colocate",
                                                 "explorer.rollout_model.gpu_memory_utilization": 0.3})
    assert asked.explorer.rollout_model.gpu_memory_utilization == 0.3  # a share asked for stands


@pytest.mark.parametrize(("tasksets", "message"), [
    (1, "a list of task sets, not int"), ([{"name": "a"}, {"name": "b"}], "2 training task sets given"),
])
def test_trinity_s_tasksets_alias_is_one_taskset_in_a_list(tasksets: object, message: str) -> None:
    # found by tests/test_fuzz.py: `tasksets: 1` was a TypeError inside validation
    data = grpo_only.model_dump(exclude_unset=True)
    data["buffer"] = {**data.get("buffer", {}), "explorer_input": {"tasksets": tasksets}}
    with pytest.raises(ValidationError, match=re.escape(f"buffer.explorer_input.tasksets: {message}")):
        ExperimentConfig.model_validate(data)
