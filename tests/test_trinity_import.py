"""Trinity-RFT YAML import: value-for-value, ${oc.env}, aliases, unsupported keys, recipes written back."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from pydantic import ValidationError

from deployments import load_recipe
from schemas import ConfigRuleError, ExperimentConfig, TrinityImportError, import_trinity
from schemas.trinity.importer import trinity_data
from schemas.trinity.recipe_source import recipe_source
from schemas.trinity.workflows import MATH_BOXED_PROMPT
from workflows.math_workflow import gold_answer, math_reward, score_math

FIXTURES = Path(__file__).parent / "fixtures" / "trinity"
QUICKSTART = FIXTURES / "quickstart.yaml"
TRINITY_ENV = ("TRINITY_CHECKPOINT_ROOT_DIR", "TRINITY_MODEL_PATH", "TRINITY_TASKSET_PATH")


@pytest.fixture(autouse=True)
def _no_trinity_env(monkeypatch):
    for var in TRINITY_ENV:
        monkeypatch.delenv(var, raising=False)


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, f"{prefix}{k}."))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(_leaves(v, f"{prefix}{i}."))
        return out
    return {prefix.rstrip("."): value}


def _at(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def _trinity_leaves(path: Path) -> dict[str, Any]:
    """The file's settings as Trinity sees them (OmegaConf-resolved), one entry per leaf."""
    return _leaves(OmegaConf.to_container(OmegaConf.load(path), resolve=True))


# Every value of the quick-start, written out by hand (env vars unset: the ${oc.env} defaults).
QUICKSTART_VALUES = {
    "project": "<project_name>", "name": "<experiment_name>", "checkpoint_root_dir": "./checkpoints",
    "algorithm.algorithm_type": "grpo", "algorithm.repeat_times": 8, "algorithm.optimizer.lr": 1e-5,
    "model.model_path": "Qwen/Qwen2.5-1.5B-Instruct", "model.max_response_tokens": 1024, "model.max_model_len": 2048,
    "cluster.node_num": 1, "cluster.gpu_per_node": 2,
    "buffer.total_epochs": 1, "buffer.batch_size": 128,
    "buffer.explorer_input.taskset.name": "gsm8k", "buffer.explorer_input.taskset.storage_type": "file",
    "buffer.explorer_input.taskset.path": "openai/gsm8k", "buffer.explorer_input.taskset.subset_name": "main",
    "buffer.explorer_input.taskset.split": "train", "buffer.explorer_input.taskset.format.prompt_key": "question",
    "buffer.explorer_input.taskset.format.response_key": "answer",
    "buffer.explorer_input.taskset.rollout_args.temperature": 1.0,
    "buffer.explorer_input.taskset.default_workflow_type": "math_workflow",
    "buffer.explorer_input.eval_tasksets.0.name": "gsm8k-eval",
    "buffer.explorer_input.eval_tasksets.0.storage_type": "file",
    "buffer.explorer_input.eval_tasksets.0.path": "openai/gsm8k",
    "buffer.explorer_input.eval_tasksets.0.subset_name": "main",
    "buffer.explorer_input.eval_tasksets.0.split": "test",
    "buffer.explorer_input.eval_tasksets.0.format.prompt_key": "question",
    "buffer.explorer_input.eval_tasksets.0.format.response_key": "answer",
    "buffer.explorer_input.eval_tasksets.0.default_workflow_type": "math_workflow",
    "buffer.trainer_input.experience_buffer.name": "gsm8k_buffer",
    "buffer.trainer_input.experience_buffer.storage_type": "queue",
    "buffer.trainer_input.experience_buffer.path": "sqlite:///gsm8k.db",
    "explorer.eval_interval": 50, "explorer.runner_per_model": 16, "explorer.rollout_model.engine_num": 1,
    "synchronizer.sync_method": "nccl", "synchronizer.sync_interval": 1,
    "trainer.save_interval": 100,
    # the backend choice is always named (Trinity's defaults: veRL, vLLM)
    "trainer.trainer_type": "verl", "explorer.rollout_model.engine_type": "vllm",
}


def test_quickstart_imports_value_for_value():
    config, unsupported = import_trinity(QUICKSTART)
    assert unsupported == []
    dump = config.model_dump(mode="json")
    for path, value in QUICKSTART_VALUES.items():
        assert _at(dump, path) == value, path
    assert len(_leaves(config.user_data())) == len(QUICKSTART_VALUES)  # nothing more, nothing less was set
    # ${oc.env:VAR,default} took the defaults
    assert config.checkpoint_root_dir == "./checkpoints"
    assert config.model.model_path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert config.buffer.explorer_input.taskset.path == "openai/gsm8k"
    assert config.buffer.explorer_input.eval_tasksets[0].path == "openai/gsm8k"
    # Trinity's defaults where the file is silent, and what Trinity derives, shown as derived
    assert config.trainer.trainer_type == "verl" and config.synchronizer.sync_method == "nccl"
    assert config.model.max_prompt_tokens == 1024
    assert config.derived["model.max_prompt_tokens"] == "max_model_len - max_response_tokens"
    assert config.buffer.train_batch_size == 1024


def test_quickstart_flow_mapping_interpolations_are_tolerated():
    # As printed in Trinity's docs, `{..., path: ${oc.env:X,y}, ...}` is not valid YAML; the importer
    # quotes such interpolations and retries, so users can bring the file as it is.
    import yaml

    with pytest.raises(yaml.YAMLError):
        OmegaConf.load(QUICKSTART)
    assert import_trinity(QUICKSTART)[0].buffer.explorer_input.eval_tasksets[0].path == "openai/gsm8k"


def test_quickstart_env_vars_are_resolved(monkeypatch):
    monkeypatch.setenv("TRINITY_MODEL_PATH", "/models/qwen")
    monkeypatch.setenv("TRINITY_TASKSET_PATH", "/data/gsm8k")
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", "/ckpt")
    config, _ = import_trinity(QUICKSTART)
    assert config.model.model_path == "/models/qwen"
    assert config.buffer.explorer_input.taskset.path == "/data/gsm8k"
    assert config.buffer.explorer_input.eval_tasksets[0].path == "/data/gsm8k"
    assert config.experiment_dir == Path("/ckpt/<project_name>/<experiment_name>")


def test_quickstart_equals_the_gsm8k_qwen_recipe():
    config, _ = import_trinity(QUICKSTART)
    renamed = config.with_overrides({"project": "rft", "name": "gsm8k-qwen"})
    assert renamed.model_dump() == load_recipe("gsm8k-qwen").model_dump()


def test_sft_warmup_stages_resolve_as_trinity_runs_them():
    config, unsupported = import_trinity(FIXTURES / "sft_warmup.yaml")
    assert unsupported == []
    dump = config.model_dump(mode="json")
    for path, value in _trinity_leaves(FIXTURES / "sft_warmup.yaml").items():
        assert _at(dump, path) == value, path
    sft, rft = config.resolve_stages()
    assert (sft.name, sft.mode, sft.algorithm.policy_loss_fn) == ("qwen-sft-rft/sft_warmup", "train", "sft")
    assert (sft.buffer.train_batch_size, sft.buffer.total_steps) == (128, 10)
    assert sft.buffer.trainer_input.experience_buffer.path == "/PATH/TO/YOUR/SFT/DATASET"
    assert sft.buffer.batch_size == 1  # Trinity replaces the whole buffer section
    assert sft.synchronizer.sync_method == "checkpoint"
    assert "mode 'train'" in sft.derived["synchronizer.sync_method"] and "(was 'nccl')" in sft.derived["synchronizer.sync_method"]
    assert rft.mode == "both" and rft.buffer.batch_size == 128 and rft.synchronizer.sync_method == "nccl"
    assert rft.model.model_path == "checkpoints/gsm8k-project/qwen-sft-rft/sft_warmup/final/huggingface"


def test_rloo_aliases_and_unsupported_keys():
    config, unsupported = import_trinity(FIXTURES / "rloo.yaml")
    assert unsupported == []
    assert config.monitor.monitor_type == "wandb"  # offline unless WANDB_API_KEY / WANDB_MODE says otherwise
    alg = config.algorithm
    assert (alg.algorithm_type, alg.advantage_fn, alg.repeat_times) == ("rloo", "rloo", 4)
    assert alg.optimizer.lr_scheduler_type == "cosine"  # warmup_style
    assert alg.policy_loss_fn_args["loss_agg_mode"] == "seq-mean-token-mean"  # algorithm.loss_agg_mode
    assert alg.kl_loss_fn_args["kl_coef"] == 0.01
    ts = config.buffer.explorer_input.taskset  # tasksets: [one]
    assert (ts.name, ts.path, ts.task_selector.selector_type, ts.task_selector.seed) == ("math", "/data/math", "shuffle", 7)
    assert ts.default_workflow_type == "math_workflow" and ts.default_reward_fn_type == "math_reward"
    assert (config.synchronizer.sync_method, config.synchronizer.sync_style) == ("nccl", "explorer_driven")
    assert config.trainer.trainer_config == {"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 32}}}


def test_gspo_import_reports_unsupported_engine_key():
    config, unsupported = import_trinity(FIXTURES / "gspo.yaml")
    assert unsupported == ["explorer.rollout_model.use_v1"]
    assert config.algorithm.policy_loss_fn == "gspo"
    assert config.algorithm.policy_loss_fn_args == {
        "clip_range": None, "clip_range_low": 0.0003, "clip_range_high": 0.0004, "loss_agg_mode": "seq-mean-token-mean"}
    assert config.buffer.train_batch_size == 512 and config.model.max_prompt_tokens == 1024


def test_tinker_import_derives_backends():
    config, unsupported = import_trinity(FIXTURES / "tinker.yaml")
    assert unsupported == []
    t = config.trainer
    assert (t.trainer_type, t.rank, t.seed, t.train_unembed, t.base_model) == ("tinker", 32, 0, False, "meta-llama/Llama-3.2-3B")
    assert config.explorer.rollout_model.engine_type == "tinker"
    assert config.derived["trainer.trainer_type"] == "alias: model.tinker.enable is true"
    assert (config.synchronizer.sync_method, config.synchronizer.sync_offset) == ("checkpoint", 1)


def test_verl_lora_import():
    config, unsupported = import_trinity(FIXTURES / "verl_lora.yaml")
    assert unsupported == []
    (lora,) = config.model.lora_configs
    assert (lora.name, lora.lora_rank, lora.lora_alpha, lora.target_modules) == ("policy", 32, 32, "all-linear")
    assert config.trainer.trainer_type == "verl" and config.synchronizer.sync_method == "checkpoint"
    assert config.algorithm.kl_loss_fn == "k2" and config.algorithm.kl_loss_fn_args["kl_coef"] == 0.0


def test_lora_with_default_nccl_is_derived_to_checkpoint(tmp_path):
    text = (FIXTURES / "verl_lora.yaml").read_text().replace(
        "synchronizer: {sync_method: checkpoint, sync_interval: 1, sync_offset: 1}", "")
    (tmp_path / "c.yaml").write_text(text)
    config, _ = import_trinity(tmp_path / "c.yaml")
    assert config.synchronizer.sync_method == "checkpoint"
    assert "model.lora_configs is set" in config.derived["synchronizer.sync_method"]


def test_lora_with_explicit_nccl_is_refused(tmp_path):
    text = (FIXTURES / "verl_lora.yaml").read_text().replace("sync_method: checkpoint", "sync_method: nccl")
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ValidationError, match="synchronizer.sync_method: 'nccl' cannot be used: model.lora_configs"):
        import_trinity(tmp_path / "c.yaml")


def test_eval_interval_off_the_sync_interval_is_rounded_down_as_trinity_does(tmp_path):
    """Trinity's IntervalConfigValidator: max(eval // sync, 1) * sync, with a warning; kept on re-validation."""
    text = QUICKSTART.read_text().replace("sync_interval: 1", "sync_interval: 4")
    (tmp_path / "c.yaml").write_text(text)
    config, _ = import_trinity(tmp_path / "c.yaml")
    assert config.explorer.eval_interval == 48
    assert any(w.startswith("explorer.eval_interval: 50 is not a multiple") for w in config.warnings)
    assert ExperimentConfig.model_validate(config.user_data()).explorer.eval_interval == 48
    (tmp_path / "c.yaml").write_text(QUICKSTART.read_text().replace("sync_interval: 1", "sync_interval: 64"))
    assert import_trinity(tmp_path / "c.yaml")[0].explorer.eval_interval == 64  # at least one sync_interval


def test_unsupported_keys_are_listed_by_dotted_path(tmp_path):
    (tmp_path / "c.yaml").write_text(QUICKSTART.read_text() + (
        "data_processor: {experience_pipeline: {operators: [{name: reward_filter}]}}\n"
        "service: {data_juicer: {auto_start: true}}\n"
        "stages:\n  - stage_name: rft\n    data_processor: {task_pipeline: {num_process: 2}}\n"
    ))
    _, unsupported = trinity_data(tmp_path / "c.yaml")
    assert unsupported == ["service", "stages.0.data_processor"]  # the experience pipeline imports (buffer/operators.py)


def test_trinity_keys_without_effect_are_left_out_with_a_warning(tmp_path):
    """Keys Trinity's current version ignores (or that change no result) do not stop an import."""
    data = OmegaConf.to_container(OmegaConf.load(FIXTURES / "math_boxed.yaml"))
    data["buffer"].update(max_retry_times=3, max_retry_interval=1)
    data["buffer"]["explorer_input"]["taskset"]["rollout_args"] = {"temperature": 1.0, "n": 8}
    # Trinity's format has every kind of row's columns: at its defaults, the ones a task set lacks say nothing
    data["buffer"]["explorer_input"]["taskset"]["format"].update(prompt_type="messages", tools_key="tools")
    data["buffer"]["trainer_input"] = {"experience_buffer": {"name": "b", "storage_type": "queue",
                                                             "replay_buffer": {"enable": False}}}
    data["explorer"]["runner_num"] = 32
    data["trainer"]["enable_preview"] = True
    data["log"] = {"level": "INFO"}
    (tmp_path / "c.yaml").write_text(OmegaConf.to_yaml(data))
    config, unsupported = import_trinity(tmp_path / "c.yaml")
    left_out = ["buffer.max_retry_times", "buffer.max_retry_interval", "buffer.explorer_input.taskset.rollout_args.n",
                "buffer.explorer_input.taskset.format.prompt_type", "buffer.explorer_input.taskset.format.tools_key",
                "buffer.trainer_input.experience_buffer.replay_buffer", "explorer.runner_num", "trainer.enable_preview", "log"]
    assert unsupported == []
    assert sorted(w.split(": left out: ")[0] for w in config.warnings if ": left out: " in w) == sorted(left_out)
    assert all(config.derived[path].startswith("alias: dropped: ") for path in left_out)
    assert config.explorer.runner_per_model == 8 and config.buffer.explorer_input.taskset.repeat_times == 8
    data["buffer"]["trainer_input"]["experience_buffer"]["replay_buffer"] = {"enable": True}  # on: a feature we lack
    (tmp_path / "c.yaml").write_text(OmegaConf.to_yaml(data))
    assert import_trinity(tmp_path / "c.yaml")[1] == ["buffer.trainer_input.experience_buffer.replay_buffer"]


def test_trainer_config_path_is_reported_with_why(tmp_path):
    (tmp_path / "c.yaml").write_text(QUICKSTART.read_text().replace(
        "trainer: {save_interval: 100}", "trainer: {save_interval: 100, trainer_config_path: examples/x/train_x.yaml}"))
    _, unsupported = import_trinity(tmp_path / "c.yaml")
    assert unsupported == ["trainer.trainer_config_path: a veRL YAML file of Trinity's repository; Trinity itself now "
                           "refuses it (deprecated: give its settings as trainer.trainer_config)"]


@pytest.mark.parametrize("section", ["{}", "null", "{experience_pipeline: {operators: []}, task_pipeline: {}}"])
def test_a_data_processor_section_that_sets_nothing_imports(tmp_path, section):
    (tmp_path / "c.yaml").write_text(QUICKSTART.read_text() + f"data_processor: {section}\n"
                                     f"stages:\n  - stage_name: rft\n    data_processor: {section}\n")
    config, unsupported = import_trinity(tmp_path / "c.yaml")
    assert unsupported == [] and config.stages[0].stage_name == "rft"


def test_missing_env_var_without_default_is_a_named_error(tmp_path):
    (tmp_path / "c.yaml").write_text("project: p\nname: n\nmodel: {model_path: '${oc.env:RFT_TEST_UNSET_VAR}'}\n")
    with pytest.raises(TrinityImportError, match="RFT_TEST_UNSET_VAR"):
        import_trinity(tmp_path / "c.yaml")


def test_broken_yaml_names_the_file_and_line(tmp_path):
    (tmp_path / "broken.yaml").write_text("project: p\nalgorithm: {algorithm_type: grpo\n")
    with pytest.raises(TrinityImportError, match=r"(?s)broken.yaml: not valid YAML.*broken.yaml, line 2"):
        import_trinity(tmp_path / "broken.yaml")


def test_identity_defaults_follow_trinity(tmp_path):
    text = "\n".join(line for line in QUICKSTART.read_text().splitlines() if not line.startswith(("project", "name")))
    (tmp_path / "c.yaml").write_text(text)
    config, _ = import_trinity(tmp_path / "c.yaml")
    assert (config.project, config.name) == ("Trinity-RFT", "rft")


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.yaml")))
def test_written_recipe_reproduces_the_import(fixture, tmp_path):
    config, _ = import_trinity(FIXTURES / fixture)
    source = recipe_source(config, source=fixture, recipe_name="imported")
    assert source.startswith('"""imported — imported from') and "Run it:" in source
    namespace: dict[str, Any] = {}
    exec(compile(source, "recipe.py", "exec"), namespace)
    assert isinstance(namespace["config"], ExperimentConfig)
    assert namespace["config"] == config


@pytest.mark.parametrize(("trainer_type", "accepted"), [("verl", True), ("torch", False)])
def test_tinker_block_replaces_trinity_s_default_trainer_type_only(tmp_path, trainer_type, accepted):
    # Trinity's own Tinker example writes trainer_type: verl (its default) beside model.tinker.enable: true
    (tmp_path / "c.yaml").write_text((FIXTURES / "tinker.yaml").read_text() + f"trainer: {{trainer_type: {trainer_type}}}\n")
    if accepted:
        config, _ = import_trinity(tmp_path / "c.yaml")
        assert config.trainer.trainer_type == "tinker"
    else:
        with pytest.raises(ConfigRuleError, match="trainer.trainer_type: 'torch' contradicts model.tinker.enable"):
            import_trinity(tmp_path / "c.yaml")


@pytest.mark.parametrize("method", ["memory", "nccl", "online"])
def test_tinker_block_moves_weights_by_checkpoint_whatever_trinity_s_sync_method(tmp_path, method):
    # Trinity's Tinker example syncs by 'memory': its Tinker trainer passes a tinker:// sampler path either way
    text = (FIXTURES / "tinker.yaml").read_text().replace("sync_method: checkpoint", f"sync_method: {method}")
    (tmp_path / "c.yaml").write_text(text)
    config, _ = import_trinity(tmp_path / "c.yaml")
    assert config.synchronizer.sync_method == "checkpoint"
    assert config.derived["synchronizer.sync_method"].startswith(f"alias: {method!r} with model.tinker.enable: true")
    assert ExperimentConfig.model_validate(config.user_data()).synchronizer.sync_method == "checkpoint"


def test_tinker_import_reports_vllm_settings_the_sampler_lacks(tmp_path):
    text = (FIXTURES / "tinker.yaml").read_text() + "explorer: {rollout_model: {tensor_parallel_size: 2, engine_num: 1}}\n"
    (tmp_path / "c.yaml").write_text(text)
    config, unsupported = import_trinity(tmp_path / "c.yaml")
    assert unsupported == ["explorer.rollout_model.tensor_parallel_size"]
    assert config.explorer.rollout_model.engine_type == "tinker" and config.explorer.rollout_model.engine_num == 1


REFUSED_AND_WARNED = FIXTURES / "refused_and_warned.yaml"


def test_keys_mapped_onto_refused_fields_are_listed_with_the_reason_and_left_out():
    config, unsupported = import_trinity(REFUSED_AND_WARNED)
    why = dict(item.split(": ", 1) for item in unsupported)
    assert sorted(why) == [
        "algorithm.kl_loss_fn_args.adaptive", "algorithm.kl_loss_fn_args.horizon", "algorithm.kl_loss_fn_args.target_kl",
        "buffer.explorer_input.taskset.format.chat_template", "buffer.explorer_input.taskset.workflow_args",
        "buffer.trainer_input.sft_warmup_dataset", "buffer.trainer_input.sft_warmup_steps",
    ]
    assert "add a first stage instead" in why["buffer.trainer_input.sft_warmup_dataset"]
    # a key a task set's format does not have (TaskFormat.NOT_HERE), with why
    assert "model.custom_chat_template" in why["buffer.explorer_input.taskset.format.chat_template"]
    # left out: the imported config runs without them; the auxiliary model is kept (docs/distill.md)
    assert config.algorithm.kl_loss_fn_args["adaptive"] is False
    assert ExperimentConfig.model_validate(config.user_data()).user_data() == config.user_data()
    assert config.buffer.explorer_input.taskset.workflow_args == {}
    assert [a.model_path for a in config.explorer.auxiliary_models] == ["Qwen/Qwen2.5-7B-Instruct"]
    assert config.explorer.rollout_model.enable_openai_api is True  # the endpoint is built: kept
    assert config.explorer.rollout_model.engine_type == "vllm"  # Trinity's vllm_async


def test_keys_mapped_onto_warned_fields_are_kept_and_listed_in_warnings():
    config, _ = import_trinity(REFUSED_AND_WARNED)
    assert [w.split(": ", 1)[0] for w in config.warnings] == [
        "algorithm.optimizer.min_lr_ratio", "model.logprobs",
        "buffer.explorer_input.eval_tasksets.0.task_selector.selector_type",
        "buffer.trainer_input.experience_buffer.path", "buffer.trainer_input.experience_buffer.capacity",
    ]
    assert config.algorithm.optimizer.min_lr_ratio == 0.1 and config.model.logprobs == 5  # kept as given


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.yaml")))
def test_every_refused_or_warned_setting_of_an_imported_file_is_reported(fixture):
    """Whatever a fixture sets, the import reports each setting the runtime refuses or ignores: the
    findings of a scan of the raw import (refusals collected, not raised) all appear in what it returns."""
    from schemas import support_check

    data, _ = trinity_data(FIXTURES / fixture)
    with support_check.collecting() as findings:
        try:
            ExperimentConfig.model_validate(data)
        except (ValidationError, ValueError):
            pass
    config, unsupported = import_trinity(FIXTURES / fixture)
    reported = {u.split(": ", 1)[0] for u in unsupported} | {w.split(": ", 1)[0] for w in config.warnings}
    for stage in config.resolve_stages() if config.stages else []:
        reported |= {f"stages.{[s.stage_name for s in config.stages].index(stage.name.rsplit('/', 1)[-1])}.{w.split(': ', 1)[0]}"
                     for w in stage.warnings} | {w.split(": ", 1)[0] for w in stage.warnings}
    missing = {f.path for f in findings} - reported
    assert not missing, missing


def test_dapo_imports_with_trinity_s_preset():
    """Trinity's DAPOAlgorithm: GRPO's advantage, the ppo loss, no KL term and no reference model; its clip-higher and
    dynamic sampling are in the config (Trinity's dapo_math example: tests/test_trinity_parity.py)."""
    config, unsupported = import_trinity(FIXTURES / "dapo.yaml")
    assert unsupported == []
    alg = config.algorithm
    assert (alg.algorithm_type, alg.advantage_fn, alg.policy_loss_fn, alg.kl_loss_fn, alg.kl_penalty_fn) == (
        "dapo", "grpo", "ppo", "none", "none")
    assert alg.repeat_times == 8 and not alg.filter_groups.enable  # the file's repeat_times; Trinity's default is 16
    assert alg.policy_loss_fn_args["clip_range_high"] == alg.policy_loss_fn_args["clip_range_low"]  # ppo's own
    assert config.derived["algorithm.policy_loss_fn"] == "preset of algorithm_type 'dapo'"
    assert config.model.ref_model_path is None and alg.kl_loss_fn == "none"
    assert load_recipe("smoke").with_overrides({"algorithm": {"algorithm_type": "dapo"}}).algorithm.repeat_times == 16


def test_dapo_imports_with_math_dapo_reward_and_its_overlong_penalty():
    config, unsupported = import_trinity(FIXTURES / "dapo.yaml")
    ts = config.buffer.explorer_input.taskset
    assert unsupported == [] and ts.default_reward_fn_type == "math_dapo_reward"
    assert ts.reward_fn_args == {"enable_overlong_penalty": True, "penalty_factor": 1.0, "max_response_length": 3072,
                                 "cache_length": 1024}


@pytest.mark.parametrize(("args", "field", "message"), [
    ({"enable_overlong_penalty": True, "penalty_factor": 1.0}, "cache_length", "needs penalty_factor, cache_length"),
    ({"enable_overlong_penalty": True, "penalty_factor": 1.0, "cache_length": 4096}, "cache_length",
     "below max_response_length (3072)"),
])
def test_math_dapo_reward_arguments_are_checked_before_anything_runs(tmp_path, args, field, message):
    data = OmegaConf.to_container(OmegaConf.load(FIXTURES / "dapo.yaml"))
    data["buffer"]["explorer_input"]["taskset"]["reward_fn_args"] = args
    path = tmp_path / "dapo.yaml"
    path.write_text(OmegaConf.to_yaml(data))
    with pytest.raises((ValidationError, ValueError), match=re.escape(message)) as info:
        import_trinity(path)
    assert f"buffer.explorer_input.taskset.reward_fn_args.{field}" in str(info.value)


def test_math_boxed_workflow_is_math_workflow_rewarding_the_boxed_answer_only():
    config, unsupported = import_trinity(FIXTURES / "math_boxed.yaml")
    train, held_out = config.buffer.explorer_input.taskset, config.buffer.explorer_input.eval_tasksets[0]
    assert unsupported == [] and config.buffer.explorer_input.default_workflow_type == "math_workflow"
    for ts in (train, held_out):
        assert (ts.default_workflow_type, ts.default_reward_fn_type) == ("math_workflow", "math_boxed_reward")
        assert ts.reward_fn_args == {"require_boxed": True, "format_score": 0.0}
    assert train.format.system_prompt == MATH_BOXED_PROMPT and held_out.format.system_prompt == "Show your work."
    assert config.derived["buffer.explorer_input.taskset.default_workflow_type"].startswith("alias: math_boxed_workflow")
    assert ExperimentConfig.model_validate(config.user_data()) == config  # a written recipe keeps the mapping
    # what Trinity's MathBoxedRewardFn gives: 1 for the right boxed answer, 0 unboxed, no format bonus
    gold = gold_answer("so $x = \\frac{1}{2}$, and the answer is $\\boxed{\\frac12}$.")
    scores = [math_reward(score_math(text, gold, **train.reward_fn_args)) for text in ("\\boxed{1/2}", "1/2", "\\boxed{3}")]
    assert scores == [1.0, 0.0, 0.0]


def test_math_boxed_workflow_arguments_without_effect_are_dropped_and_said(tmp_path):
    data = OmegaConf.to_container(OmegaConf.load(FIXTURES / "math_boxed.yaml"))
    data["buffer"]["explorer_input"]["taskset"]["workflow_args"] = {"use_base": False, "format_score_coef": 0.2}
    (tmp_path / "c.yaml").write_text(OmegaConf.to_yaml(data))
    config, unsupported = import_trinity(tmp_path / "c.yaml")  # without effect in Trinity too
    ts = config.buffer.explorer_input.taskset
    assert unsupported == [] and ts.workflow_args == {} and "think_penalty" not in ts.reward_fn_args
    assert "reads only use_base and with_think" in config.derived["buffer.explorer_input.taskset.workflow_args"]


def test_math_boxed_workflow_with_think_is_its_prompt_and_penalty(tmp_path):
    """Trinity's with_think: its <think> system prompt, and -format_score_coef for a response without the tags."""
    data = OmegaConf.to_container(OmegaConf.load(FIXTURES / "math_boxed.yaml"))
    data["buffer"]["explorer_input"]["taskset"]["workflow_args"] = {"with_think": True, "format_score_coef": 0.2}
    (tmp_path / "c.yaml").write_text(OmegaConf.to_yaml(data))
    config, unsupported = import_trinity(tmp_path / "c.yaml")
    ts = config.buffer.explorer_input.taskset
    assert unsupported == [] and ts.reward_fn_args == {"require_boxed": True, "format_score": 0.0, "think_penalty": 0.2}
    assert ts.format.system_prompt.startswith("You are a helpful assistant that solves MATH problems")
    assert ExperimentConfig.model_validate(data).buffer.explorer_input.taskset.reward_fn_args == ts.reward_fn_args
    # the penalty as math_workflow gives it: tests/test_math_workflow.py


def test_math_boxed_workflow_use_base_is_the_plain_text_prompt_of_a_base_model(tmp_path):
    data = OmegaConf.to_container(OmegaConf.load(FIXTURES / "math_boxed.yaml"))
    data["buffer"]["explorer_input"]["taskset"]["workflow_args"] = {"use_base": True}
    (tmp_path / "c.yaml").write_text(OmegaConf.to_yaml(data))
    config, unsupported = import_trinity(tmp_path / "c.yaml")
    train, held_out = config.buffer.explorer_input.taskset, config.buffer.explorer_input.eval_tasksets[0]
    assert unsupported == [] and train.format.base_model_prompt and not held_out.format.base_model_prompt
    assert config.derived["buffer.explorer_input.taskset.format.base_model_prompt"] == (
        "alias: buffer.explorer_input.taskset.workflow_args.use_base: math_boxed_workflow's plain-text prompt for a "
        "base model, without the chat template")
    assert ExperimentConfig.model_validate(config.user_data()) == config  # a written recipe keeps it
    with pytest.raises(ValidationError, match="format.base_model_prompt: only math_workflow writes a plain-text prompt"):
        config.with_overrides({"buffer.explorer_input.taskset.default_workflow_type": "q20"})


@pytest.mark.parametrize(("rollout", "model", "refused"), [
    ({"max_prompt_tokens": 512, "max_response_tokens": 1024}, {"max_prompt_tokens": 512, "max_response_tokens": 1024}, []),
    ({"max_prompt_tokens": 512}, {"max_prompt_tokens": 256, "max_response_tokens": 1024}, ["max_prompt_tokens"]),
    ({"max_response_tokens": 1024}, {"max_model_len": 2048}, ["max_response_tokens"]),
])
def test_rollout_model_lengths_are_model_s_or_refused_naming_the_fix(tmp_path, rollout, model, refused):
    """Trinity's older examples set the lengths under explorer.rollout_model (the engine's own, filled from model.*)."""
    data = OmegaConf.to_container(OmegaConf.load(FIXTURES / "math_boxed.yaml"))
    data["model"] = {"model_path": data["model"]["model_path"], **model}
    data.setdefault("explorer", {}).setdefault("rollout_model", {}).update(rollout)
    (tmp_path / "c.yaml").write_text(OmegaConf.to_yaml(data))
    config, unsupported = import_trinity(tmp_path / "c.yaml")
    assert [u.split(": ")[0] for u in unsupported] == [f"explorer.rollout_model.{key}" for key in refused]
    for key in rollout.keys() - set(refused):
        assert config.derived[f"explorer.rollout_model.{key}"].startswith(f"alias: dropped: the same as model.{key}")
    for item in unsupported:
        assert "the engines and the trainer here share model's lengths: set model." in item


@pytest.mark.parametrize("name", ["format_reward", "rm_gallery_reward",
                                  "trajectory_accuracy_grader_reward", "openjudge_multi_grader_reward"])
def test_trinity_reward_functions_no_workflow_honours_are_refused_by_name(tmp_path, name):
    data = OmegaConf.to_container(OmegaConf.load(FIXTURES / "dapo.yaml"))
    data["buffer"]["explorer_input"]["default_reward_fn_type"] = name
    path = tmp_path / "dapo.yaml"
    path.write_text(OmegaConf.to_yaml(data))
    config, unsupported = import_trinity(path)  # left out of the config, and said why
    assert any(u.startswith("buffer.explorer_input.default_reward_fn_type: Trinity's " + repr(name)) for u in unsupported), \
        unsupported
    assert config.buffer.explorer_input.taskset.default_reward_fn_type is None


def test_dapo_full_preset_arguments_yield_to_the_users(tmp_path):
    """Ours, dapo_full (the arith recipe's): clip-higher, token-mean and dynamic sampling in the preset."""
    data = OmegaConf.to_container(OmegaConf.load(FIXTURES / "dapo.yaml"))
    data["algorithm"]["algorithm_type"] = "dapo_full"
    data["algorithm"]["policy_loss_fn_args"] = {"clip_range_high": 0.3}
    path = tmp_path / "dapo.yaml"
    path.write_text(OmegaConf.to_yaml(data))
    config = import_trinity(path)[0]
    args = config.algorithm.policy_loss_fn_args
    assert (args["clip_range_low"], args["clip_range_high"], args["loss_agg_mode"]) == (0.2, 0.3, "token-mean")
    assert config.algorithm.filter_groups.enable and config.algorithm.kl_loss_fn == "none"
    assert config.derived["algorithm.filter_groups.enable"] == "preset of algorithm_type 'dapo_full'"


def test_max_actor_ckpt_to_keep_becomes_max_checkpoints_to_keep(tmp_path):
    nested = (FIXTURES / "rloo.yaml").read_text().replace(
        "trainer_config: {actor_rollout_ref:", "trainer_config: {trainer: {max_actor_ckpt_to_keep: 3}, actor_rollout_ref:")
    (tmp_path / "nested.yaml").write_text(nested)
    config, unsupported = import_trinity(tmp_path / "nested.yaml")
    assert unsupported == [] and config.trainer.max_checkpoints_to_keep == 3
    assert config.trainer.trainer_config == {"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 32}}}  # not left to veRL
    assert config.derived["trainer.max_checkpoints_to_keep"].endswith("trainer.trainer_config.trainer.max_actor_ckpt_to_keep")
    (tmp_path / "flat.yaml").write_text(QUICKSTART.read_text().replace(
        "trainer: {save_interval: 100}", "trainer: {save_interval: 100, max_actor_ckpt_to_keep: 2}"))
    config, unsupported = import_trinity(tmp_path / "flat.yaml")
    assert unsupported == [] and config.trainer.max_checkpoints_to_keep == 2 and config.trainer.trainer_config == {}
    assert ExperimentConfig.model_validate(config.user_data()).trainer.max_checkpoints_to_keep == 2  # a written recipe keeps it
    (tmp_path / "both.yaml").write_text(QUICKSTART.read_text().replace(
        "trainer: {save_interval: 100}", "trainer: {max_checkpoints_to_keep: 1, max_actor_ckpt_to_keep: 2}"))
    with pytest.raises(ConfigRuleError, match="trainer.max_actor_ckpt_to_keep: 2 contradicts trainer.max_checkpoints_to_keep: 1"):
        import_trinity(tmp_path / "both.yaml")


def test_the_importers_tables_name_classes_of_the_schema() -> None:
    """KEY_RENAMES, NO_EFFECT and NO_EFFECT_WHEN are keyed by a settings class's name (or a base's): a class renamed or
    gone would silently stop its keys' renaming or warning."""
    from pydantic import BaseModel

    from schemas.schema_walk import walk
    from schemas.trinity import keys

    names = {"ExperimentConfig"}

    def visit(prefix: str, model: type[BaseModel]) -> None:
        names.update(cls.__name__ for cls in model.__mro__)

    walk(ExperimentConfig, visit)
    tables = {"KEY_RENAMES": keys.KEY_RENAMES, "NO_EFFECT": keys.NO_EFFECT, "NO_EFFECT_WHEN": keys.NO_EFFECT_WHEN}
    unknown = {f"{table}[{name!r}]" for table, by_class in tables.items() for name in by_class if name not in names}
    assert not unknown, f"not a class of the schema: {sorted(unknown)}"
