"""The experiment's rules about its data: the buffer's sizes, the training and evaluation task sets (workflow, reward,
generator), what the trainer reads (its dataset, expert rows, preference pairs) and the experience pipeline. Run by
schemas/rules.py (`buffer_rules`, `data_processor_rules`) in its order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError

from algorithms import POLICY_LOSS_FNS, is_preference_loss, uses_expert_rows
from algorithms.advantage.gigpo import STEP_STATE_WORKFLOWS
from algorithms.needs import needs_critic, needs_groups, needs_steps
from generators import GENERATOR_ARGS, generator_name, same_held_out
from schemas.algorithm_registry import ALGORITHM_PRESETS
from schemas.base import set_unmarked
from schemas.buffer import DataFormat, StorageConfig
from schemas.data_processor import DATA_JUICER, OPERATOR_ARGS
from schemas.resolver import Resolver
from schemas.rewards import RewardArgsError, dapo_overlong_args, reasoning_gym_answer_format, step_arg
from schemas.stage_kind import stage_kind
from schemas.taskset import TasksetConfig
from schemas.trinity.operators import NOT_BUILT as TRINITY_OPERATORS_NOT_BUILT
from schemas.trinity.workflows import NOT_BUILT as TRINITY_WORKFLOWS_NOT_BUILT

if TYPE_CHECKING:
    from schemas.experiment_fields import ExperimentFields


# ----------------------------------------------------------------------------- buffer
def buffer_rules(r: Resolver[ExperimentFields]) -> None:
    c = r.config
    b = c.buffer
    alg = c.algorithm
    preset = ALGORITHM_PRESETS[alg.algorithm_type]
    if b.train_batch_size is None:
        if not preset.needs_rollout and b.is_set("batch_size"):  # Trinity: batch_size × repeat_times (1)
            r.derive(b, "train_batch_size", b.batch_size, "buffer.train_batch_size",
                     f"buffer.batch_size ({b.batch_size}): rows per step of a dataset")
        elif not preset.needs_rollout:
            r.error("buffer.train_batch_size",
                    f"required when algorithm.algorithm_type is {alg.algorithm_type!r} (it learns from a dataset: "
                    "set it, or buffer.batch_size)")
        else:
            r.derive(b, "train_batch_size", b.batch_size * alg.repeat_times, "buffer.train_batch_size",
                     f"buffer.batch_size ({b.batch_size}) × algorithm.repeat_times ({alg.repeat_times})")
    elif stage_kind(c).explores and needs_groups(alg) and b.train_batch_size % alg.repeat_times:
        r.error("buffer.train_batch_size",
                f"{b.train_batch_size} is not a multiple of algorithm.repeat_times ({alg.repeat_times}): train "
                f"batches must hold whole groups for advantage_fn {alg.advantage_fn!r}")
    _explorer_input(r)
    _trainer_input(r)
    _expert_rows(r)
    _held_out_kept_apart(r)


def _explorer_input(r: Resolver[ExperimentFields]) -> None:
    c = r.config
    ei = c.buffer.explorer_input
    if stage_kind(c).explores:
        if ei.taskset is None:
            r.error("buffer.explorer_input.taskset", f"required in mode {c.mode!r}")
        elif not ei.taskset.path:
            r.error("buffer.explorer_input.taskset.path", f"required in mode {c.mode!r}")
    if ei.taskset is not None:
        _taskset(r, ei.taskset, "buffer.explorer_input.taskset", is_eval=False, index=0)
    for i, ts in enumerate(ei.eval_tasksets):
        _taskset(r, ts, f"buffer.explorer_input.eval_tasksets.{i}", is_eval=True, index=i)


def _taskset(r: Resolver[ExperimentFields], ts: TasksetConfig, path: str, *, is_eval: bool, index: int) -> None:
    c = r.config
    ei = c.buffer.explorer_input
    if is_eval and not ts.path:
        r.error(f"{path}.path", "required: evaluation needs a dataset")
    if not ts.name:
        r.derive(ts, "name", f"eval_taskset_{index}" if is_eval else "taskset", f"{path}.name", "position in the config")
    if ts.storage_type != "file":
        r.error(f"{path}.storage_type", f"task sets are read from files or the hub; got {ts.storage_type!r}")
    _generator_args(r, ts, path)
    group = c.algorithm.repeat_times
    if ts.repeat_times is None:
        value, reason = (1, "evaluation default") if is_eval else (group, "algorithm.repeat_times")
        r.derive(ts, "repeat_times", value, f"{path}.repeat_times", reason)
    elif not is_eval and ts.repeat_times != group:
        r.error(f"{path}.repeat_times",
                f"{ts.repeat_times} differs from algorithm.repeat_times ({group}); set only algorithm.repeat_times")
    if ts.default_workflow_type is None:
        candidates = ([("default_eval_workflow_type", ei.default_eval_workflow_type)] if is_eval else []) + [
            ("default_workflow_type", ei.default_workflow_type)]
        for name, value in candidates:
            if value is not None:
                r.derive(ts, "default_workflow_type", value, f"{path}.default_workflow_type",
                         f"buffer.explorer_input.{name}")
                break
        else:
            r.error(f"{path}.default_workflow_type",
                    "no workflow: set it, or buffer.explorer_input.default_workflow_type"
                    + (" / default_eval_workflow_type" if is_eval else ""))
    if (not is_eval and needs_steps(c.algorithm) and stage_kind(c).explores and ts.default_workflow_type is not None
            and ts.default_workflow_type not in STEP_STATE_WORKFLOWS
            and ts.default_workflow_type not in TRINITY_WORKFLOWS_NOT_BUILT):  # those are refused with their reason
        r.error(f"{path}.default_workflow_type",
                f"advantage_fn 'gigpo' groups the steps of multi-turn episodes by the environment state each acted in "
                f"(experience info 'step_states', with 'turn_spans'); {ts.default_workflow_type!r} records no step "
                f"states: use a workflow that does ({', '.join(sorted(STEP_STATE_WORKFLOWS))}), or multi_step_grpo / "
                "grpo")
    if ts.default_workflow_type in AUXILIARY_ARGS:  # a workflow that talks to an auxiliary model, by name
        arg, required = AUXILIARY_ARGS[ts.default_workflow_type]
        names = [m.auxiliary_name() for m in c.explorer.auxiliary_models]
        chosen = (ts.workflow_args or {}).get(arg)
        if not names and (required or chosen is not None):
            r.error("explorer.auxiliary_models", f"{path} runs {ts.default_workflow_type}, whose {arg} is an auxiliary "
                    "model: add one (its model_path and a name)")
        elif chosen is not None and chosen not in names:
            r.error(f"{path}.workflow_args.{arg}", f"{chosen!r} is not an auxiliary model; explorer.auxiliary_models: {names}")
    if ts.default_reward_fn_type is None and ei.default_reward_fn_type is not None:
        r.derive(ts, "default_reward_fn_type", ei.default_reward_fn_type, f"{path}.default_reward_fn_type",
                 "buffer.explorer_input.default_reward_fn_type")
    ra = ts.rollout_args
    for field in ("temperature", "top_p", "top_k", "logprobs"):
        if getattr(ra, field) is None:
            r.derive(ra, field, getattr(c.model, field), f"{path}.rollout_args.{field}", f"model.{field}")
    if ra.max_tokens is None:
        r.derive(ra, "max_tokens", c.model.max_response_tokens, f"{path}.rollout_args.max_tokens",
                 "model.max_response_tokens")
    try:
        step_arg(ts.reward_fn_args or {}, "step_penalty", ts.default_reward_fn_type)
        if (step_arg(ts.reward_fn_args or {}, "step_token_reward", ts.default_reward_fn_type) and not is_eval
                and needs_critic(c.algorithm)):
            raise RewardArgsError("step_token_reward", f"advantage_fn {c.algorithm.advantage_fn!r} makes every token's "
                                  "advantage from the critic's values (GAE), which leave process rewards out")
        if ts.default_reward_fn_type == "math_dapo_reward":
            dapo_overlong_args(ts.reward_fn_args or {}, ra.max_tokens)
        if ts.default_reward_fn_type == "reasoning_gym_reward":
            reasoning_gym_answer_format(ts.reward_fn_args or {})
    except RewardArgsError as exc:
        r.error(f"{path}.reward_fn_args.{exc.key}", exc.message)
    if (ts.default_reward_fn_type != "math_dapo_reward" and c.model.max_response_tokens is not None
            and ra.max_tokens > c.model.max_response_tokens):
        r.error(f"{path}.rollout_args.max_tokens",
                f"{ra.max_tokens} exceeds model.max_response_tokens ({c.model.max_response_tokens})")


def _generator_args(r: Resolver[ExperimentFields], ts: TasksetConfig | StorageConfig, path: str) -> None:
    """Generated rows' arguments (a task set's or a dataset's), checked and completed with the generator's defaults."""
    name = generator_name(ts.path)
    if name is None:
        if ts.generator_args:
            r.error(f"{path}.generator_args", "only a generated taskset (path 'generator:NAME') takes arguments")
        return
    args_model = GENERATOR_ARGS.get(name)
    if args_model is None:
        r.error(f"{path}.path", f"unknown generator {name!r}; known: {sorted(GENERATOR_ARGS)}")
        return
    given = dict(ts.generator_args or {})
    try:
        resolved = args_model.model_validate(given).model_dump(mode="json")
    except ValidationError as exc:
        r.args_errors(f"{path}.generator_args", f"generator {name!r}", args_model, exc)
        return
    for key in resolved:
        if key not in given:
            r.config.derived[f"{path}.generator_args.{key}"] = f"default of generator {name!r}"
    set_unmarked(ts, "generator_args", resolved)


def _held_out_kept_apart(r: Resolver[ExperimentFields]) -> None:
    """A generated eval taskset holds out problems of the training data only when both have the same arguments."""
    c = r.config
    ei = c.buffer.explorer_input
    train = ei.taskset or c.buffer.trainer_input.experience_buffer  # an SFT stage trains on the rows of its buffer
    for i, ts in enumerate(ei.eval_tasksets):
        name = generator_name(ts.path)
        if (train is not None and name and ts.path == train.path
                and not same_held_out(name, train.generator_args or {}, ts.generator_args or {})):
            r.warn(f"buffer.explorer_input.eval_tasksets.{i}.generator_args differ from the training data's: "
                   "its held-out problems may be trained on (give both the same arguments, train-only ones aside)")


def _trainer_input(r: Resolver[ExperimentFields]) -> None:
    c = r.config
    ti = c.buffer.trainer_input
    path = "buffer.trainer_input.experience_buffer"
    eb = ti.experience_buffer
    kind = stage_kind(c)
    rl_train_side = kind.rl and not kind.explores  # mode train with an RL algorithm: the buffer an explore run fills
    if kind.from_dataset:
        if eb is None or not eb.path:
            r.error(f"{path}.path" if eb is not None else path,
                    "required in mode 'train': the dataset (or stored experiences) to train on")
    elif rl_train_side:
        if eb is None:
            r.derive(ti, "experience_buffer", StorageConfig(name="experience_buffer", storage_type="sqlite"), path,
                     "mode 'train' with an RL algorithm trains on the experiment's buffer, filled by its explore run")
        if c.buffer.total_steps is None and c.buffer.explorer_input.taskset is None:
            r.error("buffer.total_steps", "required in mode 'train' without a taskset (the steps cannot be counted)")
    elif kind.together:
        if eb is None:
            r.derive(ti, "experience_buffer", StorageConfig(name="experience_buffer", storage_type="queue"), path,
                     f"mode {c.mode!r} streams experiences from explorer to trainer through a queue")
        elif eb.storage_type == "file":
            r.error(f"{path}.storage_type",
                    f"'file' cannot stream experiences in mode {c.mode!r}; use 'queue' (or 'sqlite') "
                    "(Trinity would switch it to queue silently)")
    if eb is not None and not eb.name:
        r.derive(eb, "name", "experience_buffer", f"{path}.name", "default name")
    if eb is not None and generator_name(eb.path):  # SFT rows made by a generator
        _generator_args(r, eb, path)
    if eb is not None and kind.from_dataset and is_preference_loss(c.algorithm.policy_loss_fn):
        _pair_columns(r, eb.format, f"{path}.format")
    if (pairs := ti.eval_pairs) is not None:  # held-out pairs, scored at each evaluation (tasks/dpo.py)
        if not pairs.name:
            r.derive(pairs, "name", "eval_pairs", "buffer.trainer_input.eval_pairs.name", "default name")
        if generator_name(pairs.path):
            _generator_args(r, pairs, "buffer.trainer_input.eval_pairs")
        _pair_columns(r, pairs.format, "buffer.trainer_input.eval_pairs.format")


# Workflows that reach an auxiliary model by name: {workflow: (its workflow_args key, whether it needs one)}.
AUXILIARY_ARGS = {"llm_judge_workflow": ("judge", True), "q20": ("answerer", False)}
# the losses that train on the mix strategy's expert rows (algorithms/policy_loss/mix.py)
MIX_LOSSES = tuple(name for name in POLICY_LOSS_FNS if uses_expert_rows(name))


def _expert_rows(r: Resolver[ExperimentFields]) -> None:
    """The mix family: the mix sample strategy adds expert rows of an auxiliary buffer, which only a mix loss
    trains on; each needs the other."""
    alg = r.config.algorithm
    ti = r.config.buffer.trainer_input
    for name, dataset in ti.auxiliary_buffers.items():
        path = f"buffer.trainer_input.auxiliary_buffers.{name}"
        if not dataset.name:
            r.derive(dataset, "name", name, f"{path}.name", "its key in auxiliary_buffers")
        if not dataset.path:
            r.error(f"{path}.path", "required: the dataset's file, folder or generator:NAME")
        _generator_args(r, dataset, path)
    mixing = alg.sample_strategy == "mix"
    if mixing:
        name = (alg.sample_strategy_args or {}).get("sft_dataset_name", "sft_dataset")
        if name not in ti.auxiliary_buffers:
            r.error(f"buffer.trainer_input.auxiliary_buffers.{name}",
                    "required by algorithm.sample_strategy 'mix': the SFT dataset its expert rows are read from "
                    f"(named by algorithm.sample_strategy_args.sft_dataset_name, {name!r})"
                    + (f"; given: {sorted(ti.auxiliary_buffers)}" if ti.auxiliary_buffers else ""))
        if alg.policy_loss_fn not in MIX_LOSSES:
            r.error("algorithm.sample_strategy", f"'mix' adds expert rows, which only a mix loss trains on "
                    f"(algorithm.policy_loss_fn {' or '.join(MIX_LOSSES)}; got {alg.policy_loss_fn!r})")
        if not stage_kind(r.config).together:
            r.error("algorithm.sample_strategy", f"'mix' adds expert rows to the batches of RL experiences; mode "
                    f"must be 'both' (got {r.config.mode!r})")
    elif alg.policy_loss_fn in MIX_LOSSES:
        r.error("algorithm.policy_loss_fn", f"{alg.policy_loss_fn!r} trains on the sampled rows and the expert rows "
                f"that algorithm.sample_strategy 'mix' adds (got {alg.sample_strategy!r})")


def data_processor_rules(r: Resolver[ExperimentFields]) -> None:
    """The experience pipeline's operators and their arguments, each named by its place (buffer/operators.py)."""
    pipeline = r.config.data_processor.experience_pipeline
    if pipeline is None:
        return
    for i, op in enumerate(pipeline.operators):
        path = f"data_processor.experience_pipeline.operators.{i}"
        if op.name == DATA_JUICER:
            r.error(f"{path}.name", "'data_juicer' hands the experiences to Data-Juicer, which is not a dependency here "
                    f"(not installed); the built-in operators are {sorted(OPERATOR_ARGS)}")
        elif op.name in TRINITY_OPERATORS_NOT_BUILT:  # Trinity's, not built (or mapped onto settings): why
            r.error(f"{path}.name", f"{op.name!r}: {TRINITY_OPERATORS_NOT_BUILT[op.name]}")
        elif op.name not in OPERATOR_ARGS:
            r.error(f"{path}.name", f"unknown operator {op.name!r}; known: {sorted(OPERATOR_ARGS)}")
        else:
            for key in sorted(set(op.args) - set(OPERATOR_ARGS[op.name])):
                r.error(f"{path}.args.{key}", f"{op.name!r} has no argument {key!r}; its arguments: "
                        f"{sorted(OPERATOR_ARGS[op.name]) or 'none'}")
            for j, rule in enumerate(op.args.get("reward_shaping_configs") or []):
                if not isinstance(rule, dict) or rule.get("op_type", "ADD") not in ("ADD", "SUB", "MUL", "DIV"):
                    r.error(f"{path}.args.reward_shaping_configs.{j}", "a {stats_key, op_type, weight} mapping with "
                            "op_type ADD, SUB, MUL or DIV")
    where = pipeline.input_save_path
    if where is not None and (where.startswith(("/", "~")) or ".." in where.replace("\\", "/").split("/")):
        r.error("data_processor.experience_pipeline.input_save_path",
                f"{where!r}: a path inside the experiment folder (relative, no '..')")


def _pair_columns(r: Resolver[ExperimentFields], fmt: DataFormat, path: str) -> None:
    """A preference pair's columns (Trinity's names): the prompt, the chosen and the rejected response, each its own."""
    prompt_field = "messages_key" if fmt.prompt_type == "messages" else "prompt_key"
    for field in ("chosen_key", "rejected_key"):
        value = getattr(fmt, field)
        if not value:
            r.error(f"{path}.{field}", "required by a preference loss: the column of the "
                    f"{field.removesuffix('_key')} response")
        elif value == getattr(fmt, prompt_field):
            r.error(f"{path}.{field}", f"{value!r} is also format.{prompt_field}: the prompt and each response need "
                    "columns of their own")
    if fmt.chosen_key and fmt.chosen_key == fmt.rejected_key:
        r.error(f"{path}.rejected_key", f"{fmt.rejected_key!r} is also format.chosen_key: the chosen and the rejected "
                "responses need columns of their own")


