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
from typer.testing import CliRunner

from cli.main import app
from deployments import load_recipe
from schemas import ConfigRuleError, ExperimentConfig, describe_errors, support_check
from schemas.algorithm_registry import BUILT, FUNCTION_REGISTRIES
from schemas.errors import error_items

# Trinity-RFT main's ALGORITHM_TYPE registry (agentscope-ai/Trinity-RFT, trinity/algorithm/__init__.py).
TRINITY_ALGORITHM_TYPES = [
    "cpt", "sft", "ppo", "grpo", "m2po", "dapo", "reinforceplusplus", "rloo", "opmd", "asymre", "dpo", "topr", "cispo",
    "gspo", "sapo", "mix", "mix_chord", "raft", "sppo", "rec", "multi_step_grpo", "gigpo", "on_policy_distill", "jsd",
    "grpo_verl",
]
REFUSED_TYPES: dict[str, str] = {  # Trinity's, refused: what the reason says
    "cpt": "no dataset format here reads raw text",
}
# The mix family's expert rows: an SFT dataset among the trainer's auxiliary buffers.
_EXPERT = {"buffer.trainer_input.auxiliary_buffers": {"sft_dataset": {"path": "expert.jsonl",
                                                                      "format": {"prompt_type": "plaintext"}}}}
# The distillation presets learn from a teacher: the first auxiliary model (here the smoke model itself).
_TEACHER = {"explorer.auxiliary_models": [{"model_path": "HuggingFaceTB/SmolLM2-135M-Instruct", "name": "teacher"}]}
# Presets that learn from a dataset only, in mode train (the smoke recipe is mode both): their dataset.
DATASET_ONLY = {"dpo": {"mode": "train", "buffer.train_batch_size": 2,
                        "buffer.trainer_input.experience_buffer": {"path": "pairs.jsonl", "format": {"prompt_type": "plaintext"}}},
                "on_policy_distill": _TEACHER, "jsd": _TEACHER, "mix": _EXPERT, "mix_chord": _EXPERT,
                # step-level groups need a workflow that records each step's state (algorithms/advantage/gigpo.py)
                "gigpo": {"buffer.explorer_input.taskset.default_workflow_type": "frozenlake"}}
# The function registries: Trinity's names (main's registries, and those issue 26 lists from later releases).
TRINITY_FUNCTIONS = {
    "advantage_fn": ["ppo", "grpo", "grpo_verl", "step_wise_grpo", "reinforceplusplus", "reinforce", "remax", "rloo",
                     "opmd", "opmd_verl", "asymre", "asymre_verl", "rec", "on_policy_distill", "jsd", "gigpo", "clipb",
                     "clipv", "cod"],
    "policy_loss_fn": ["ppo", "opmd", "dpo", "sft", "mix", "gspo", "topr", "cispo", "sft_is", "sft_phi", "mix_chord",
                       "sppo", "rec", "sapo", "importance_sampling", "m2po"],
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
        assert config.algorithm.algorithm_type == ("grpo" if algorithm_type == "grpo_verl" else algorithm_type)


@pytest.mark.parametrize(("algorithm_type", "expected"), [
    # Trinity's presets (trinity/algorithm/algorithm.py on main): repeat_times, advantage, loss, KL loss, entropy
    ("dapo", (16, "grpo", "ppo", "none", "default")),
    ("m2po", (8, "grpo", "m2po", "none", "none")),
    ("grpo_verl", (2, "grpo", "ppo", "k2", "default")),
])
def test_trinity_presets_have_trinity_s_defaults(algorithm_type: str, expected: tuple) -> None:
    alg = load_recipe("smoke").with_overrides({"algorithm": {"algorithm_type": algorithm_type}}).algorithm
    assert (alg.repeat_times, alg.advantage_fn, alg.policy_loss_fn, alg.kl_loss_fn, alg.entropy_loss_fn) == expected
    assert alg.kl_penalty_fn == "none" and not alg.filter_groups.enable


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, names in TRINITY_FUNCTIONS.items() for n in names])
def test_trinity_function_is_built_or_refused_with_a_reason(kind: str, name: str) -> None:
    assert name in FUNCTION_REGISTRIES[kind], f"{kind} {name!r} is unknown"
    found = support_check.entry_for(f"algorithm.{kind}[{name}]")
    refusal = found[1].unconditional if found is not None else None
    if refusal is not None and refusal.level == "refuse":
        assert len(refusal.reason) > 20 and "unknown" not in refusal.reason
    else:  # a sample strategy is built where it has an order (tests/test_experience_store.py)
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
    "grpo_frozen_lake": [],  # frozen_lake_workflow is our frozenlake; its max_steps our max_turns
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
    assert config.derived["buffer.trainer_input.auxiliary_buffers.sft_dataset"].startswith(
        "alias: buffer.trainer_input.sft_warmup_dataset")  # moved there, not kept as the old warm-up's dataset
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


# ----------------------------------------------------------------------------- Trinity main's registries (issue 73)
# Trinity-RFT main's WORKFLOWS registry (agentscope-ai/Trinity-RFT, trinity/common/workflows/__init__.py), copied here.
TRINITY_WORKFLOWS = [
    "simple_workflow", "async_simple_workflow", "math_workflow", "async_math_workflow", "math_boxed_workflow",
    "async_math_boxed_workflow", "math_eval_workflow", "async_math_eval_workflow", "math_rm_workflow",
    "async_math_rm_workflow", "tool_call_workflow", "agentscope_workflow_adapter", "agentscope_workflow_adapter_v1",
    "agentscope_react_workflow", "agentscope_react_math_workflow", "as_react_workflow",
    "agentscopev0_react_math_workflow", "agentscope_v1_react_search_workflow", "email_search_workflow",
    "alfworld_workflow", "RAFT_alfworld_workflow", "RAFT_reflect_alfworld_workflow", "frozen_lake_workflow",
    "sciworld_workflow", "webshop_workflow", "intercode_sql_workflow", "step_wise_alfworld_workflow",
    "async_math_ruler_workflow", "math_ruler_workflow", "math_trainable_ruler_workflow", "rubric_judge_workflow",
    "rubric_judge_openai_workflow", "simple_mm_workflow", "async_simple_mm_workflow", "on_policy_distill_workflow",
    "on_policy_distill_math_workflow", "thinking_budget_workflow", "sudoku_workflow",
]
# Trinity-RFT main's EXPERIENCE_OPERATORS registry (trinity/buffer/operators/__init__.py).
TRINITY_OPERATORS = ["reward_filter", "reward_std_filter", "dapo_dynamic_sampling", "mask_response_truncated",
                     "reward_shaping_mapper", "pass_rate_calculator", "data_juicer", "invalid_reward_filter",
                     "cod_advantage_fn", "cod_overwrite_reward_with_returns"]
_TS = "buffer.explorer_input.taskset"


def test_the_registry_copies_agree() -> None:
    from schemas.trinity.algorithms import NOT_BUILT_ARGS, NOT_BUILT_FUNCTIONS
    from schemas.trinity.workflows import TRINITY_WORKFLOWS as SCHEMA_COPY

    assert sorted(SCHEMA_COPY) == sorted(TRINITY_WORKFLOWS)
    assert {k: sorted(v) for k, v in NOT_BUILT_ARGS.items()} == {k: sorted(v) for k, v in NOT_BUILT_FUNCTIONS.items()}


@pytest.mark.parametrize("workflow", TRINITY_WORKFLOWS)
def test_every_trinity_workflow_runs_or_is_refused_at_validation(workflow: str) -> None:
    """Each name of Trinity's registry, on a task set that names a reward function: validation leaves a workflow of
    ours (run as it is, or mapped), or refuses it naming the field and why; never first at pre-flight or run time."""
    from workflows import WORKFLOWS

    try:
        config = load_recipe("smoke").with_overrides({f"{_TS}.default_workflow_type": workflow,
                                                      f"{_TS}.default_reward_fn_type": "math_boxed_reward"})
    except ValidationError as exc:
        problems = dict(error_items(exc))
        why = problems.get(f"{_TS}.default_workflow_type", "")
        assert len(why) > 40 and "unknown" not in why, problems
    else:
        assert config.buffer.explorer_input.taskset.default_workflow_type in WORKFLOWS, workflow


@pytest.mark.parametrize(("workflow", "reward", "prompt"), [("simple_workflow", "accuracy_reward", ""),
                                                            ("async_simple_workflow", "math_boxed_reward", ""),
                                                            ("async_math_workflow", "accuracy_reward", None),
                                                            ("async_math_boxed_workflow", "math_dapo_reward", "Please")])
def test_trinity_workflows_that_run_here_are_mapped(workflow: str, reward: str, prompt: str | None) -> None:
    config = load_recipe("smoke").with_overrides({f"{_TS}.default_workflow_type": workflow,
                                                  f"{_TS}.default_reward_fn_type": reward})
    ts = config.buffer.explorer_input.taskset
    assert (ts.default_workflow_type, ts.default_reward_fn_type) == ("math_workflow", reward)
    assert prompt is None or (ts.format.system_prompt or "").startswith(prompt)
    assert f"{_TS}.default_workflow_type" in config.derived
    assert ExperimentConfig.model_validate(config.user_data()).user_data() == config.user_data()  # as a recipe
    if "math_boxed" in workflow:  # Trinity's workflow masks a response cut at the token limit
        assert config.data_processor.experience_pipeline.operators[0].name == "mask_response_truncated"


def test_simple_workflow_without_a_reward_function_is_refused_as_trinity_does() -> None:
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({f"{_TS}.default_workflow_type": "simple_workflow"})
    assert "raises without one" in dict(error_items(exc.value))[f"{_TS}.default_workflow_type"]


@pytest.mark.parametrize("operator", TRINITY_OPERATORS)
def test_every_trinity_operator_runs_or_is_refused_at_validation(operator: str) -> None:
    from buffer.operators import OPERATORS

    try:
        config = load_recipe("smoke").with_overrides(
            {"data_processor": {"experience_pipeline": {"operators": [{"name": operator}]}}})
    except (ValidationError, ConfigRuleError) as exc:
        problems = dict(exc.problems if isinstance(exc, ConfigRuleError) else error_items(exc))
        why = problems.get("data_processor.experience_pipeline.operators.0.name", "")
        assert len(why) > 40 and "unknown" not in why, problems
    else:
        names = [op.name for op in config.data_processor.experience_pipeline.operators]
        assert all(name in OPERATORS for name in names), names
        assert operator in names or config.algorithm.filter_groups.enable  # dapo_dynamic_sampling: filter_groups


def _quickstart_with(path: Path, text: str) -> None:
    """Trinity main's gspo_gsm8k example (a quickstart config) with the settings of `text` merged in."""
    from omegaconf import OmegaConf

    quickstart = OmegaConf.load(MAIN / "gspo_gsm8k.yaml")
    path.write_text(OmegaConf.to_yaml(OmegaConf.merge(quickstart, OmegaConf.create(text))))


@pytest.mark.parametrize(("text", "path", "says"), [
    ("synchronizer: {sync_style: fully_async}", "synchronizer.sync_style", "trainer_driven"),
    ("explorer: {over_rollout: {ratio: 0.25}}", "explorer.over_rollout", "waits for all its tasks"),
    ("explorer: {dynamic_timeout: {enable: true, ratio: 3.0}}", "explorer.dynamic_timeout", "max_timeout"),
    ("algorithm: {algorithm_type: grpo, bypass_old_logprobs: false}", "algorithm.bypass_old_logprobs", "rollout's"),
])
def test_trinity_settings_not_built_are_refused_by_name(tmp_path: Path, text: str, path: str, says: str) -> None:
    from schemas.trinity.importer import import_trinity

    _quickstart_with(tmp_path / "c.yaml", text)
    try:
        _, unsupported = import_trinity(tmp_path / "c.yaml")
        problems = dict(item.partition(": ")[::2] for item in unsupported)
    except ValidationError as exc:
        problems = dict(error_items(exc))
    assert says in problems.get(path, ""), problems


@pytest.mark.parametrize("text", ["explorer: {over_rollout: {ratio: 0.0}, dynamic_timeout: {enable: false}, "
                                  "concurrent_mode: asynchronous, max_repeat_times_per_runner: 1}",
                                  "algorithm: {algorithm_type: grpo, bypass_old_logprobs: true}"])
def test_trinity_settings_without_effect_here_are_left_out_with_a_warning(tmp_path: Path, text: str) -> None:
    from schemas.trinity.importer import import_trinity

    _quickstart_with(tmp_path / "c.yaml", text)
    config, unsupported = import_trinity(tmp_path / "c.yaml")
    assert unsupported == [] and any(": left out: " in w for w in config.warnings), config.warnings


# ----------------------------------------------------------------------------- Trinity main's example configs
# tests/fixtures/trinity/main/: Trinity-RFT main's example configs as stored (agentscope-ai/Trinity-RFT examples/),
# unedited. Each imports and validates (with the TRINITY_* variables their files read), or is refused naming each
# field and why.
MAIN = Path(__file__).parent / "fixtures" / "trinity" / "main"
MAIN_IMPORTS = {  # example: (trainer, algorithm_type) as imported
    "dapo_math": ("verl", "dapo"),
    "m2po_gsm8k_trainer": ("torch", "m2po"),  # veRL computes its loss per micro-batch: read for the torch trainer
    "m2po_gsm8k_explorer": ("verl", "m2po"),  # the explorer of the pair: no trainer runs
    "gspo_gsm8k": ("verl", "gspo"),
    "rloo_gsm8k": ("verl", "rloo"),
    "sapo_gsm8k": ("verl", "sapo"),
}
MAIN_REFUSED = {  # example: {field: what the reason says}
    "clipb": {"algorithm.advantage_fn": "entropy under the policy"},
    "gigpo_alfworld": {"buffer.explorer_input.taskset.default_workflow_type": "environment"},
    "intercode_sql": {"buffer.explorer_input.taskset.default_workflow_type": "InterCode-SQL"},
}


def _import_main(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from schemas.trinity.importer import import_trinity

    monkeypatch.setenv("TRINITY_MODEL_PATH", "HuggingFaceTB/SmolLM2-135M-Instruct")
    monkeypatch.setenv("TRINITY_TASKSET_PATH", "openai/gsm8k")
    return import_trinity(MAIN / f"{name}.yaml")


def test_every_main_example_has_an_expected_outcome() -> None:
    assert sorted(MAIN_IMPORTS.keys() | MAIN_REFUSED.keys()) == sorted(p.stem for p in MAIN.glob("*.yaml"))


@pytest.mark.parametrize("name", sorted(MAIN_IMPORTS))
def test_trinity_main_example_imports_and_validates(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    config, unsupported = _import_main(name, monkeypatch)
    assert unsupported == []
    assert (config.trainer.trainer_type, config.algorithm.algorithm_type) == MAIN_IMPORTS[name]
    assert ExperimentConfig.model_validate(config.user_data()).user_data() == config.user_data()  # as a recipe
    result = CliRunner().invoke(app, ["validate", str(MAIN / f"{name}.yaml")])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("name", sorted(MAIN_REFUSED))
def test_trinity_main_example_is_refused_naming_each_field(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises((ValidationError, ConfigRuleError)) as exc:
        _import_main(name, monkeypatch)
    problems = dict(exc.value.problems if isinstance(exc.value, ConfigRuleError) else error_items(exc.value))
    for path, says in MAIN_REFUSED[name].items():
        assert path in problems and says in problems[path], (path, problems)
    assert not any("unknown" in why for why in problems.values()), problems


def test_trinity_s_dapo_example_is_its_dapo(monkeypatch: pytest.MonkeyPatch) -> None:
    """dapo_math on main: Trinity's dapo preset with the file's clip-higher and token-mean; mask_response_truncated an
    operator; dapo_dynamic_sampling dynamic sampling by accuracy, one round (Trinity's operator samples no more);
    math_boxed_workflow scoring with math_dapo_reward and its overlong penalty, the plain-text prompt of a base model."""
    config, _ = _import_main("dapo_math", monkeypatch)
    alg = config.algorithm
    assert (alg.algorithm_type, alg.repeat_times, alg.advantage_fn, alg.policy_loss_fn, alg.kl_loss_fn) == (
        "dapo", 16, "grpo", "ppo", "none")
    args = alg.policy_loss_fn_args
    assert (args["clip_range_low"], args["clip_range_high"], args["clip_ratio_c"], args["loss_agg_mode"]) == (
        0.2, 0.28, 1e6, "token-mean")
    assert [op.name for op in config.data_processor.experience_pipeline.operators] == ["mask_response_truncated"]
    groups = alg.filter_groups
    assert (groups.enable, groups.metric, groups.max_num_gen_batches) == (True, "accuracy", 1)
    assert config.derived["algorithm.filter_groups.enable"].startswith(
        "alias: data_processor.experience_pipeline.operators.1: Trinity's dapo_dynamic_sampling")
    ts = config.buffer.explorer_input.taskset
    assert (ts.default_workflow_type, ts.default_reward_fn_type, ts.format.base_model_prompt) == (
        "math_workflow", "math_dapo_reward", True)
    assert ts.reward_fn_args == {"enable_overlong_penalty": True, "penalty_factor": 1.0, "max_response_length": 20480,
                                 "cache_length": 4096}
    assert ts.format.system_prompt.startswith("Solve the following math problem step by step.")
    assert (config.model.max_prompt_tokens, config.model.max_response_tokens) == (1024, 20480)


def test_trinity_s_m2po_trainer_runs_on_the_torch_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    config, _ = _import_main("m2po_gsm8k_trainer", monkeypatch)
    alg = config.algorithm
    assert (config.mode, alg.repeat_times, alg.advantage_fn, alg.kl_loss_fn, alg.entropy_loss_fn) == (
        "train", 8, "grpo", "none", "none")
    assert (alg.policy_loss_fn_args["m2_threshold"], alg.policy_loss_fn_args["log_ratio_clip"]) == (0.04, 20.0)
    assert config.derived["algorithm.bypass_old_logprobs"].startswith("alias: dropped: the ratio's old log-probs")
    assert "m2po" in config.derived["trainer.trainer_type"]


def test_trinity_environment_workflows_are_ours_under_our_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, _ = _import_example("grpo_frozen_lake", tmp_path, monkeypatch)
    taskset = config.buffer.explorer_input.taskset
    assert (taskset.default_workflow_type, taskset.workflow_args.get("max_turns")) == ("frozenlake", 10)
    assert "max_steps" not in taskset.workflow_args
    sudoku = load_recipe("smoke").with_overrides({f"{_TS}.default_workflow_type": "sudoku_workflow"})
    assert sudoku.buffer.explorer_input.taskset.default_workflow_type == "sudoku"
