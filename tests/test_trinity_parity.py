"""Every name Trinity-RFT's algorithm registries know (docs/trinity-parity.md) is known here: each
`algorithm_type` validates on the smoke recipe or is refused naming `algorithm.algorithm_type` and a
reason, and each function either has an implementation or a refusal with its reason. No name is
"unknown". (Which of them train a step: tests/test_presets.py.) Trinity's example configs import, or are
refused naming each field and why; its workflows that are not built are refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from deployments import load_recipe
from schemas import ConfigRuleError, ExperimentConfig, describe_errors, support
from schemas.algorithm_registry import BUILT, FUNCTION_REGISTRIES
from schemas.errors import error_items

# Trinity-RFT's ALGORITHM_TYPE registry (trinity/algorithm/__init__.py), and `dapo`, our preset of its example.
TRINITY_ALGORITHM_TYPES = [
    "sft", "ppo", "grpo", "reinforceplusplus", "rloo", "opmd", "asymre", "dpo", "topr", "cispo", "gspo", "sapo",
    "mix", "mix_chord", "raft", "sppo", "rec", "multi_step_grpo", "on_policy_distill", "jsd", "dapo",
]
REFUSED_TYPES: dict[str, str] = {}
# The mix family's expert rows: an SFT dataset among the trainer's auxiliary buffers.
_EXPERT = {"buffer.trainer_input.auxiliary_buffers": {"sft_dataset": {"path": "expert.jsonl",
                                                                      "format": {"prompt_type": "plaintext"}}}}
# The distillation presets learn from a teacher: the first auxiliary model (here the smoke model itself).
_TEACHER = {"explorer.auxiliary_models": [{"model_path": "HuggingFaceTB/SmolLM2-135M-Instruct", "name": "teacher"}]}
# Presets that learn from a dataset only, in mode train (the smoke recipe is mode both): their dataset.
DATASET_ONLY = {"dpo": {"mode": "train", "buffer.train_batch_size": 2,
                        "buffer.trainer_input.experience_buffer": {"path": "pairs.jsonl", "format": {"prompt_type": "plaintext"}}},
                "on_policy_distill": _TEACHER, "jsd": _TEACHER, "mix": _EXPERT, "mix_chord": _EXPERT}
# The function registries: Trinity's names (and those issue 26 lists from later releases).
TRINITY_FUNCTIONS = {
    "advantage_fn": ["ppo", "grpo", "grpo_verl", "step_wise_grpo", "reinforceplusplus", "reinforce", "remax", "rloo",
                     "opmd", "opmd_verl", "asymre", "asymre_verl", "rec", "on_policy_distill", "jsd", "gigpo"],
    "policy_loss_fn": ["ppo", "opmd", "dpo", "sft", "mix", "gspo", "topr", "cispo", "sft_is", "sft_phi", "mix_chord",
                       "sppo", "rec", "sapo", "importance_sampling", "clipb", "clipv", "m2po"],
    "kl_loss_fn": ["none", "k1", "k2", "k3", "low_var_kl", "abs", "corrected_k3"],
    "entropy_loss_fn": ["default", "mix", "none"],
    "sample_strategy": ["default", "warmup", "staleness_control", "mix"],
}
DOC = Path(__file__).resolve().parents[1] / "docs" / "trinity-parity.md"


@pytest.mark.parametrize("algorithm_type", TRINITY_ALGORITHM_TYPES)
def test_trinity_algorithm_type_validates_or_is_refused_with_its_reason(algorithm_type: str) -> None:
    try:
        config = load_recipe("smoke").with_overrides({"algorithm": {"algorithm_type": algorithm_type},
                                                      **DATASET_ONLY.get(algorithm_type, {})})
    except ValidationError as exc:
        lines = [line for line in describe_errors(exc) if line.startswith("algorithm.algorithm_type:")]
        assert algorithm_type in REFUSED_TYPES, lines or describe_errors(exc)
        assert lines and REFUSED_TYPES[algorithm_type] in lines[0] and "unknown" not in lines[0], lines
    else:
        assert algorithm_type not in REFUSED_TYPES
        assert config.algorithm.policy_loss_fn in BUILT["policy_loss_fn"]
        assert config.algorithm.advantage_fn in BUILT["advantage_fn"]


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, names in TRINITY_FUNCTIONS.items() for n in names])
def test_trinity_function_is_built_or_refused_with_a_reason(kind: str, name: str) -> None:
    assert name in FUNCTION_REGISTRIES[kind], f"{kind} {name!r} is unknown"
    entry = support.entry_for(f"algorithm.{kind}[{name}]")
    assert entry is not None, name
    refusal = entry[1].unconditional
    if refusal is not None and refusal.level == "refuse":
        assert len(refusal.reason) > 20 and "unknown" not in refusal.reason
    else:
        assert kind not in BUILT or name in BUILT[kind] or name == "none", f"{kind} {name!r} is neither built nor refused"


def test_the_parity_page_names_every_trinity_name() -> None:
    text = DOC.read_text()
    for name in TRINITY_ALGORITHM_TYPES + [n for names in TRINITY_FUNCTIONS.values() for n in names]:
        assert name in text, name


@pytest.mark.parametrize("mode", ["train", "both"])
def test_an_unknown_algorithm_type_is_a_named_error_not_a_traceback(tmp_path: Path, mode: str) -> None:
    from schemas.trinity.importer import import_trinity

    (tmp_path / "c.yaml").write_text(
        f"mode: {mode}\nproject: p\nname: n\nalgorithm: {{algorithm_type: not_an_algorithm}}\n"
        "model: {model_path: HuggingFaceTB/SmolLM2-135M-Instruct, max_prompt_tokens: 64, max_response_tokens: 64}\n"
        "buffer:\n  batch_size: 4\n  trainer_input:\n    experience_buffer: {name: x, path: x.jsonl}\n")
    with pytest.raises(ValidationError) as exc:
        import_trinity(tmp_path / "c.yaml")
    assert any(line.startswith("algorithm.algorithm_type: unknown algorithm 'not_an_algorithm'")
               for line in describe_errors(exc.value)), describe_errors(exc.value)


# ----------------------------------------------------------------------------- Trinity's example configs
# tests/fixtures/trinity/examples/: Trinity-RFT's example configs, trimmed to the settings that decide the
# outcome (docs/trinity-parity.md has the table of all of them). Each imports — listing only what Trinity
# itself no longer reads or what is not built — or is refused naming each field and why.
EXAMPLES = Path(__file__).parent / "fixtures" / "trinity" / "examples"
IMPORTS = {  # example: the settings still listed as not imported (they need --allow-unsupported)
    "grpo_gsm8k": [],
    "tinker": [],
    "cispo_gsm8k": ["trainer.trainer_config_path"],  # Trinity itself refuses it now
    "sft_mot": ["trainer.trainer_config_path"],
    # a Data-Juicer task pipeline is not run (Data-Juicer is not a dependency); its service address goes with it
    "grpo_gsm8k_task_pipeline": ["data_processor.data_workflow_url", "data_processor.task_pipeline"],
    # losses veRL lacks run as its ppo_loss's mode (backends/verl/losses.py)
    "topr_gsm8k": ["trainer.trainer_config_path"],
    # Trinity refuses its rollout lengths too ("Unable to determine max_model_len" without model.*'s); left out here
    "asymre_math": ["explorer.rollout_model.max_prompt_tokens", "explorer.rollout_model.max_response_tokens"],
    # the mix family on veRL, as written
    "mix_math": [],
    "mix_chord": ["trainer.trainer_config_path"],  # and with_think: the <think> prompt and penalty
    "dpo_plaintext": [],  # on veRL, as written
    # on veRL with its critic; scored with Trinity's countdown_reward (workflows/countdown.py)
    "ppo_countdown": [],
    "ppo_countdown_megatron": [],
}
REFUSED = {  # example: {field: what the reason says}
    # Trinity refuses this file's lengths too; with them under model.* it trains: tests/test_trinity_dapo.py
    "dapo_math": {"explorer.rollout_model.max_prompt_tokens": "set model.max_prompt_tokens: 1024 instead",
                  "explorer.rollout_model.max_response_tokens": "set model.max_response_tokens: 20480 instead",
                  "model.max_model_len": "cannot be derived"},
    "grpo_gsm8k_ruler": {"buffer.explorer_input.default_workflow_type": "judge model"},
    "grpo_frozen_lake": {"buffer.explorer_input.default_workflow_type": "environment"},
    "agentscope_react": {"buffer.explorer_input.taskset.default_workflow_type": "AgentScope"},
    "grpo_vlm": {"buffer.explorer_input.default_workflow_type": "images"},
    "bots_random": {"buffer.explorer_input.default_workflow_type": "class path"},
    "dpo_humanlike": {"data": "before 0.2"},
}


def _import_example(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **edits: str) -> Any:
    """Import an example as its user would: Trinity's /PATH/TO/ placeholders (model, data, checkpoints)
    replaced by real paths, the TRINITY_* variables unset (their defaults apply)."""
    from schemas.trinity.importer import import_trinity

    for var in ("TRINITY_CHECKPOINT_ROOT_DIR", "TRINITY_MODEL_PATH", "TRINITY_TASKSET_PATH", "TRINITY_EVAL_TASKSET_PATH"):
        monkeypatch.delenv(var, raising=False)
    text = (EXAMPLES / f"{name}.yaml").read_text().replace("/PATH/TO/", f"{tmp_path}/")
    for old, new in edits.items():
        text = text.replace(old, new)
    (tmp_path / f"{name}.yaml").write_text(text)
    return import_trinity(tmp_path / f"{name}.yaml")


def test_every_vendored_example_has_an_expected_outcome() -> None:
    assert sorted(IMPORTS.keys() | REFUSED.keys()) == sorted(p.stem for p in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("name", sorted(IMPORTS))
def test_trinity_example_imports(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, unsupported = _import_example(name, tmp_path, monkeypatch)
    assert [u.split(": ")[0] for u in unsupported] == IMPORTS[name]
    assert ExperimentConfig.model_validate(config.user_data()).user_data() == config.user_data()  # as a recipe


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_trinity_example_is_refused_naming_each_field(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises((ValidationError, ConfigRuleError)) as exc:
        _import_example(name, tmp_path, monkeypatch)
    problems = dict(exc.value.problems if isinstance(exc.value, ConfigRuleError) else error_items(exc.value))
    for path, says in REFUSED[name].items():
        assert path in problems and says in problems[path], (path, problems)
    assert not any("unknown" in why for why in problems.values()), problems


def test_trinity_example_settings_are_followed_as_trinity_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cispo, _ = _import_example("cispo_gsm8k", tmp_path, monkeypatch)
    assert cispo.explorer.eval_interval == 48  # 50 rounded down to a multiple of sync_interval 4, as Trinity does
    assert {"buffer.max_retry_times", "explorer.runner_num"} <= {w.split(": ")[0] for w in cispo.warnings}
    grpo, _ = _import_example("grpo_gsm8k", tmp_path, monkeypatch)
    assert grpo.trainer.trainer_type == "verl" and "trainer.trainer_type" not in grpo.derived  # veRL runs all of it
    tinker, _ = _import_example("tinker", tmp_path, monkeypatch)
    assert (tinker.trainer.trainer_type, tinker.synchronizer.sync_method) == ("tinker", "checkpoint")
    # asymre (the opmd loss) runs on the torch trainer; math_boxed_workflow becomes math_workflow scoring the boxed answer
    asymre, unsupported = _import_example("asymre_math", tmp_path, monkeypatch,
                                          **{"trainer: {save_interval": "trainer: {trainer_type: torch, save_interval"})
    ts = asymre.buffer.explorer_input.taskset
    assert (ts.default_workflow_type, ts.reward_fn_args) == ("math_workflow", {"require_boxed": True, "format_score": 0.0})
    assert {u.split(": ")[0] for u in unsupported} >= {"explorer.rollout_model.max_prompt_tokens",
                                                       "explorer.rollout_model.max_response_tokens"}
    # DPO on veRL, as written: imports whole, Trinity's pair columns and loss defaults, its KL term as written;
    # veRL's micro-batches are fixed pairs (derived, noted)
    dpo, unsupported = _import_example("dpo_plaintext", tmp_path, monkeypatch)
    assert unsupported == [] and dpo.trainer.trainer_type == "verl" and not dpo.warnings, dpo.warnings
    assert (dpo.trainer.use_dynamic_bsz, dpo.trainer.micro_batch_size) == (False, 2)
    fmt = dpo.buffer.trainer_input.experience_buffer.format
    assert (dpo.mode, fmt.prompt_type, fmt.prompt_key, fmt.chosen_key, fmt.rejected_key) == (
        "train", "plaintext", "prompt", "chosen", "rejected")
    assert dpo.algorithm.policy_loss_fn_args == {"beta": 0.1, "label_smoothing": 0.0}
    assert (dpo.algorithm.kl_loss_fn, dpo.algorithm.kl_loss_fn_args["kl_coef"]) == ("k1", 0.1)
    assert ExperimentConfig.model_validate(dpo.user_data()).user_data() == dpo.user_data()  # as a recipe


def test_trinity_mix_imports_on_verl_with_its_expert_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mix_math as its user would run it here, on veRL as written: its sft_warmup_dataset (without warm-up steps)
    is the mix strategy's expert data, and the loss's per-GPU batch split is left out (noted)."""
    config, unsupported = _import_example("mix_math", tmp_path, monkeypatch)  # as written: trainer_type 'verl'
    assert unsupported == [] and config.trainer.trainer_type == "verl"
    assert not [w for w in config.warnings if w.startswith("trainer.")], config.warnings
    alg = config.algorithm
    assert (alg.sample_strategy, alg.policy_loss_fn, alg.entropy_loss_fn) == ("mix", "mix", "mix")
    assert alg.sample_strategy_args == {"expert_data_ratio": 0.25, "sft_dataset_name": "sft_dataset"}
    assert (alg.policy_loss_fn_args["mu"], alg.policy_loss_fn_args["use_token_level_loss_in_sft"]) == (0.1, False)
    expert = config.buffer.trainer_input.auxiliary_buffers["sft_dataset"]
    assert (expert.name, expert.format.prompt_type, expert.format.messages_key) == ("math_sft", "messages", "messages")
    assert config.buffer.trainer_input.sft_warmup_dataset is None
    assert "algorithm.policy_loss_fn_args.ppo_mini_batch_size" in config.derived
    assert ExperimentConfig.model_validate(config.user_data()).user_data() == config.user_data()  # as a recipe


def test_trinity_ppo_imports_on_verl_with_its_critic_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ppo example as its user would run it here: on veRL (its default, which trains the critic), scored by
    Trinity's countdown reward. Its critic settings, in veRL's tree, land in trainer.critic."""
    config, unsupported = _import_example("ppo_countdown", tmp_path, monkeypatch)
    assert unsupported == [] and config.trainer.trainer_type == "verl"
    assert not [w for w in config.warnings if w.startswith("trainer.")], config.warnings
    assert config.buffer.explorer_input.taskset.default_reward_fn_type == "countdown_reward"
    alg = config.algorithm
    assert (alg.advantage_fn, alg.advantage_fn_args) == ("ppo", {"gamma": 1.0, "lam": 1.0})
    assert config.model.critic_model_path == config.model.model_path
    assert (config.trainer.critic.optim.lr, config.trainer.critic.cliprange_value) == (1e-5, 0.5)
    assert {"trainer.critic.optim.lr", "trainer.critic.cliprange_value"} <= set(config.derived)
    assert ExperimentConfig.model_validate(config.user_data()).user_data() == config.user_data()  # as a recipe


@pytest.mark.parametrize(("workflow", "says"), [("alfworld_workflow", "environment"), ("as_react_workflow", "AgentScope"),
                                                ("RAFT_baseline_webshop_workflow", "R3L"),
                                                ("examples.my_plugin.MyWorkflow", "class path")])
def test_a_trinity_workflow_not_built_is_refused_by_name_in_our_configs(workflow: str, says: str) -> None:
    with pytest.raises(ValidationError) as exc:
        load_recipe("gsm8k").with_overrides({"buffer.explorer_input.default_workflow_type": workflow})
    problems = dict(error_items(exc.value))
    assert says in problems["buffer.explorer_input.default_workflow_type"], problems


def test_the_parity_page_names_every_trinity_workflow_refused() -> None:
    from schemas.trinity.workflows import NOT_BUILT

    text = DOC.read_text()
    assert [name for name in NOT_BUILT if name not in text] == []
