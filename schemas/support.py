"""What the runtime does with a setting beyond reading it: refusals, warnings, and fields that validation alone uses.

A setting without an entry is honoured: the runtime reads it, and the suite's real runs are the evidence (a whole
run records every field read, schemas/read_trace.py, and tests/settings_reads.py fails for one nobody read). An entry
in `SUPPORT` is keyed by its schema path (each tagged-union variant, list item, algorithm preset and each `*_args`
function registry of `schemas.algorithm_registry` included):

    buffer.batch_size                             a field
    buffer.explorer_input.eval_tasksets[].split   a field of every list item
    trainer[torch].dtype                          a field of one variant of a tagged union
    trainer[*].save_interval                      ... of every variant (used when no exact entry exists)
    algorithm.algorithm_type[grpo]                one preset (a value of algorithm_type)
    algorithm.policy_loss_fn[ppo]                 one function of a registry ...
    algorithm.policy_loss_fn[ppo].clip_range      ... and one of its arguments (policy_loss_fn_args)
    mode[serve]                                   one value of a Literal field (optional entry)

An entry says one of (schemas/wiring.py)
- `honoured(note=..., passthrough=...)`: read, with a note on how (shown in docs/settings.md), or a Literal whose
  values are a library's own names;
- `resolved("other.path", ...)`: validation turns it into these fields, themselves wired;
- `validated()`: its whole meaning is a constraint that `schemas/rules.py` enforces;
- `refused(reason)`: a value other than the default (or, for a variant, choosing it) is an error at
  validation naming the field and the reason;
- `warned(reason)`: the same, as a warning (only where ignoring it is harmless). Warnings appear in
  `rft validate`, `rft import-trinity`, the Prefect run log and the MLflow run (param `warnings`);
- `per_trainer()`: each trainer backend implements it (the optimizer): see below.
Honoured fields can carry conditional refusals or warnings (`.refuse_if(when, reason)`,
`.warn_if(when, reason)`). A refused or warned variant or section covers everything below it (a
variant's settings do not matter when it cannot run).

Where the entries come from: this module writes the runtime's; each backend's settings class gives
its own (`SETTINGS` of the classes in schemas/trainer.py and schemas/explorer.py); each function
`algorithms/` implements, and each of its arguments, is honoured in the module that defines it unless
an entry here says otherwise.

Per trainer backend: what every trainer implements itself — the optimizer's fields, the arguments of
each loss and term it runs (`trainer_claims`) — must be read in that backend's own modules
(`TrainerBase.MODULES`) or be refused or warned for it (`TrainerBase.ALGORITHM_SETTINGS`, applied
here in the modes that train).

Adding a field: read it where it takes effect, in a run a test makes; an entry only when it is refused, warned, or has
no reader of its own. Each value of a Literal field appears in the runtime's code or has its own entry
(tests/test_settings_wired.py). Values the schema derived itself (listed in `derived`) are never refused or warned:
they are not the user's.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from algorithms import is_preference_loss, needs_critic
from schemas.algorithm_registry import BUILT, KL_FNS
from schemas.buffer import FEATURE_SELECTORS, DifficultyArgs, TaskSelectorConfig
from schemas.explorer import ENGINE_VARIANTS
from schemas.rewards import MATH_WORKFLOW_REWARD_FNS
from schemas.stage_kind import stage_kind
from schemas.trainer import TRAINER_VARIANTS, TrainerBase
from schemas.trinity.algorithms import NOT_BUILT_FUNCTIONS as TRINITY_NOT_BUILT_FUNCTIONS
from schemas.trinity.workflows import CLASS_PATH, R3L, is_class_path, is_r3l
from schemas.trinity.workflows import NOT_BUILT as TRINITY_WORKFLOWS_NOT_BUILT
from schemas.wiring import Entry, honoured, per_trainer, read_in, refused, resolved, validated, warned

if TYPE_CHECKING:
    from schemas.experiment_fields import ExperimentFields


# ----------------------------------------------------------------------------- conditions
def _rl_mode(value: Any, config: ExperimentFields) -> bool:
    """The trainer reads experiences (mode both or colocate, or train with an RL algorithm), not a dataset."""
    return stage_kind(config).rl


def _wandb_missing(value: Any, config: ExperimentFields) -> bool:
    return importlib.util.find_spec("wandb") is None


# The rest of Trinity-RFT's reward registry (trinity/common/rewards), each refused with why.
TRINITY_REFUSED_REWARD_FNS = {
    "format_reward": "Trinity's format_reward scores only a <think>/<answer> layout, which no workflow here asks "
                     "for; math_workflow's format bonus is for a \\boxed{} answer (math_boxed_reward)",
    "rm_gallery_reward": "it calls a reward model of RM-Gallery, which is not installed or served here",
    "trajectory_accuracy_grader_reward": "it asks an LLM judge (an auxiliary model), which is not built",
    "openjudge_multi_grader_reward": "it asks LLM judges (auxiliary models), which are not built",
}


def _unknown_reward_fn(value: Any, config: ExperimentFields) -> bool:
    return value is not None and value not in MATH_WORKFLOW_REWARD_FNS and value not in TRINITY_REFUSED_REWARD_FNS


def _refuse_trinity_reward_fns(entry: Entry) -> Entry:
    for name, reason in TRINITY_REFUSED_REWARD_FNS.items():
        entry = entry.refuse_if(lambda v, c, name=name: v == name, f"Trinity's {name!r}: {reason}")
    return entry


def _refuse_trinity_workflows(entry: Entry) -> Entry:
    for name, reason in TRINITY_WORKFLOWS_NOT_BUILT.items():
        entry = entry.refuse_if(lambda v, c, name=name: str(v).lower() == name.lower(), f"Trinity's {name!r}: {reason}")
    return entry.refuse_if(lambda v, c: is_r3l(v), R3L).refuse_if(lambda v, c: is_class_path(v), CLASS_PATH)


def _train_selector(config: ExperimentFields) -> TaskSelectorConfig | None:
    taskset = config.buffer.explorer_input.taskset
    return taskset.task_selector if taskset is not None else None


def _no_features(value: Any, config: ExperimentFields) -> bool:
    selector = _train_selector(config)
    return selector is None or selector.selector_type not in FEATURE_SELECTORS


def _not_difficulty_based(value: Any, config: ExperimentFields) -> bool:
    selector = _train_selector(config)
    return selector is None or selector.selector_type != "difficulty_based"


def _harder_when_unread(value: Any, config: ExperimentFields) -> bool:
    """harder_when orders offline_easy2hard and ranks difficulty_based's features for its prior rank only."""
    selector = _train_selector(config)
    return _no_features(value, config) or (selector is not None and selector.selector_type == "difficulty_based"
                                           and selector.kwargs.prior != "rank")


NO_FEATURES = "read by the offline_easy2hard and difficulty_based selectors only"


# math_workflow and its calculator variant (workflows/calculator.py): one prompt, one scoring, no workflow_args.
MATH_WORKFLOWS = ("math_workflow", "math_calculator_workflow")


def _args_of_math_workflow(value: Any, config: ExperimentFields) -> bool:
    """These workflow_args belong to a taskset rolled out by math_workflow, which takes none."""
    ei = config.buffer.explorer_input
    return any(ts.workflow_args is value and ts.default_workflow_type in MATH_WORKFLOWS and not ts.format.workflow_key
               for ts in (ei.taskset, *ei.eval_tasksets) if ts is not None)


def _base_prompt_outside_math_workflow(value: Any, config: ExperimentFields) -> bool:
    """A task set asks for a plain-text prompt but a workflow other than math_workflow may run it."""
    ei = config.buffer.explorer_input
    return bool(value) and any(ts.format.base_model_prompt and (ts.default_workflow_type not in MATH_WORKFLOWS
                                                                or ts.format.workflow_key)
                               for ts in (ei.taskset, *ei.eval_tasksets) if ts is not None)


def _trinity_math_reward(value: Any, config: ExperimentFields) -> bool:
    return value == "math_reward"


# ----------------------------------------------------------------------------- reasons used more than once
NOT_TASKS = "a trainer input is not rolled out as tasks: the setting has no effect"
ONLY_SFT_DATA = "only a dataset's rows (mode train with algorithm sft or dpo) are read through this format"
NO_TOOLS = ("no workflow reads tools from the data: gsm8k_tool_agent's calculator is in its code "
            "(workflows/tool_agent.py)")
NO_REPLY_PREFIX = "no workflow forces the start of the reply"
# Preference pairs (chosen, rejected) are the rows of a DPO stage's dataset, not tasks.
PAIRS_NOT_TASKS = ("preference pairs are read from the trainer's dataset (buffer.trainer_input.experience_buffer, "
                   "algorithm_type dpo); a task set is rolled out, its answers are sampled")
ONLY_PREFERENCE = "only a preference loss (algorithm_type dpo, policy_loss_fn dpo) reads it"
# Trinity adapts the coefficient of the reward's KL penalty only (its kl_loss_fn keeps kl_coef fixed).
ADAPTIVE_LOSS_KL = ("an adaptive coefficient applies to kl_penalty_fn (KL in the reward), as in Trinity; kl_loss_fn "
                    "takes a fixed kl_coef")
RL_BUFFER = ("in an RL mode experiences are kept in the experiment's own SQLite buffer "
             "(buffer/experiences.db in the experiment folder)")
NO_CRITIC = ("no critic is trained: only advantage_fn 'ppo' (GAE, the ppo preset) uses one; the setting has no "
             "effect")

NO_BUDGET_CHECK = ("only a stage that trains (mode 'both', 'colocate' or 'train') keeps the usage ledger and stops at a budget; "
                   "an 'explore' run stops when its trainer does, 'bench' and 'serve' run to the end")
SFT_SAMPLES_NO_TOKENS = ("a stage that learns from a dataset (sft, dpo) samples no tokens: budget.max_tokens "
                         "(tokens sampled) never stops it; budget.max_wall_minutes does")
NO_GPUS_COUNTED = ("the run holds no GPUs (cluster.gpu_per_node 0, or a service such as Tinker trains and samples): "
                   "its GPU seconds stay 0 and budget.max_gpu_hours never stops it; budget.max_wall_minutes or "
                   "budget.max_tokens does")


def _keeps_ledger(c: ExperimentFields) -> bool:
    return stage_kind(c).keeps_ledger  # colocate too: it runs flows/rl.py, which keeps it


def _holds_no_gpus(c: ExperimentFields) -> bool:
    return c.cluster.gpu_per_node == 0 or not c.explorer.rollout_model.HOLDS_GPUS


def _learns_from_dataset(c: ExperimentFields) -> bool:
    """A stage that learns from a dataset (sft, dpo), not from rollouts."""
    return stage_kind(c).from_dataset


def _not_preference(value: Any, config: ExperimentFields) -> bool:
    return not is_preference_loss(config.algorithm.policy_loss_fn)


SUPPORT: dict[str, Entry] = {
    # --------------------------------------------------------------------- experiment
    "mode[colocate]": honoured(note="on CPU: the in-turns plan of mode both; refused on GPUs (schemas/rules.py)"),
    "group": honoured(note="a tag of the experiment's MLflow runs, the W&B group"),
    "checkpoint_root_dir": honoured(note="and every path through experiment_dir"),
    "derived": honoured(note="an output"),
    "warnings": honoured(note="an output"),
    "stages[].stage_name": resolved("name", note="each stage is validated as a whole config named {name}/{stage_name}"),
    "stages[].mode": resolved("mode"),
    # --------------------------------------------------------------------- algorithm
    # the optimizer is each trainer backend's own (schemas/trainer.py: TrainerBase.ALGORITHM_SETTINGS)
    "algorithm.optimizer.lr": per_trainer(),
    "algorithm.optimizer.lr_warmup_steps": per_trainer(),
    "algorithm.optimizer.lr_warmup_steps_ratio": per_trainer(),
    "algorithm.optimizer.min_lr_ratio": per_trainer().warn_if(
        lambda v, c: v and c.algorithm.optimizer.lr_scheduler_type == "constant",
        "has no effect with lr_scheduler_type 'constant' (only cosine decays to it)"),
    "algorithm.optimizer.lr_scheduler_type": per_trainer(),
    "algorithm.optimizer.optimizer_type": per_trainer(),
    "algorithm.optimizer.betas": per_trainer(),
    "algorithm.optimizer.eps": per_trainer(),
    "algorithm.optimizer.weight_decay": per_trainer(),
    # dynamic sampling lives on the explore side, so every trainer backend gets it (docs/dapo.md)
    "algorithm.filter_groups.gen_batch_size": honoured().warn_if(
        lambda v, c: v and not c.algorithm.filter_groups.enable,
        "has no effect without dynamic sampling (algorithm.filter_groups.enable)"),
    # presets: each either trains in tests/test_presets.py or is refused
    # sample strategies
    # KL as a reward penalty: applied by the trainers that hold the reference (backends/reward_kl.py)
    "algorithm.kl_penalty_fn[none]": honoured(note="is_off"),
    "algorithm.kl_penalty_fn[none].kl_coef": validated(note="must be 0 with 'none'"),
    # --------------------------------------------------------------------- model
    "model.ref_model_path": honoured(note="trainer checks: schemas/trainer.py (Tinker refuses it, veRL with LoRA too)"),
    "model.critic_model_path": honoured().warn_if(lambda v, c: not needs_critic(c.algorithm),
                                                                      NO_CRITIC),
    "model.temperature": resolved("buffer.explorer_input.taskset.rollout_args.temperature"),
    "model.top_p": resolved("buffer.explorer_input.taskset.rollout_args.top_p"),
    "model.top_k": resolved("buffer.explorer_input.taskset.rollout_args.top_k"),
    "model.logprobs": warned("engines record the sampled token's logprob only; top logprobs are not kept",
                             when=lambda v, c: v > 0),
    "model.max_prompt_tokens": honoured(note="longer prompts are skipped and counted (explore/prompts_too_long)"),
    "model.lora_configs[].name": warned(
        "adapters are merged into the weights the engines serve: no adapter is served by name"),
    "model.lora_configs[].path": honoured(note="the adapter training starts from"),
    "model.lora_configs[].base_model_name": warned(
        "adapters are merged into the weights the engines serve; the base model is model.model_path"),
    "model.lora_configs[].lora_dtype": honoured().refuse_if(
        lambda v, c: v not in ("auto", "float32", "bfloat16", "float16"), "one of auto, float32, bfloat16, float16"),
    # --------------------------------------------------------------------- cluster
    "cluster.node_num": honoured(note="check-requirements: Ray must have that many nodes"),
    # --------------------------------------------------------------------- buffer
    # the defaults are derived into each task set (derived values are not checked): the same refusals
    "buffer.explorer_input.default_workflow_type": _refuse_trinity_workflows(honoured()),
    "buffer.explorer_input.default_eval_workflow_type": _refuse_trinity_workflows(resolved(
        "buffer.explorer_input.eval_tasksets[].default_workflow_type")),
    "buffer.explorer_input.default_reward_fn_type": resolved("buffer.explorer_input.taskset.default_reward_fn_type"),
    "buffer.trainer_input.sft_warmup_dataset": refused(
        "Trinity's old warm-up is not run; add a first stage instead (stage_name sft_warmup, mode train, "
        "algorithm_type sft, this dataset as its buffer.trainer_input.experience_buffer), then a stage rft"),
    "buffer.trainer_input.sft_warmup_steps": refused(
        "Trinity's old warm-up is not run; use a first stage with algorithm sft and buffer.total_steps (see "
        "buffer.trainer_input.sft_warmup_dataset)"),
    "buffer.trainer_input.experience_buffer.capacity": warned(
        "the SQLite buffer has no capacity limit (the schedule bounds how far the explorer runs ahead)"),
    "buffer.trainer_input.experience_buffer.max_read_timeout": warned(
        "the trainer waits for the explorer's experiences up to synchronizer.sync_timeout"),
    # --------------------------------------------------------------------- explorer
    "explorer.max_timeout": honoured(note="per workflow task, inside the runner"),
    "explorer.max_retry_times": honoured(note="retries of a workflow task, and of the explore/evaluate Prefect tasks"),
    "explorer.auxiliary_models": honoured(note="vLLM engines of other models; the first is the distillation teacher"),
    # --------------------------------------------------------------------- trainer
    # --------------------------------------------------------------------- synchronizer, monitor
    "monitor.monitor_type[wandb]": honoured().refuse_if(
        _wandb_missing, "'wandb' needs the wandb package (pip install wandb); it logs offline unless WANDB_API_KEY "
                        "or WANDB_MODE is set"),
    "monitor.enable_ray_timeline": honoured(note="a Chrome trace in {experiment_dir}/log/"),
    "monitor.gate": honoured(note="after the last stage").refuse_if(
        lambda v, c: v is not None and c.monitor.monitor_type != "mlflow",
        "a gate moves an MLflow registry alias: it needs monitor.monitor_type 'mlflow'"),
    # --------------------------------------------------------------------- budget
    "budget.max_tokens": honoured().warn_if(
        lambda v, c: v is not None and not _keeps_ledger(c), NO_BUDGET_CHECK).warn_if(
        lambda v, c: v is not None and _learns_from_dataset(c), SFT_SAMPLES_NO_TOKENS),
    "budget.max_wall_minutes": honoured().warn_if(
        lambda v, c: v is not None and not _keeps_ledger(c), NO_BUDGET_CHECK),
    "budget.max_gpu_hours": honoured().warn_if(
        lambda v, c: v is not None and not _keeps_ledger(c), NO_BUDGET_CHECK).warn_if(
        lambda v, c: v is not None and _holds_no_gpus(c), NO_GPUS_COUNTED),
}

# Each backend's settings: a variant is honoured by the registry that names its implementation, and its
# settings as its class says (schemas/trainer.py, schemas/explorer.py).
for _tag, _variant in TRAINER_VARIANTS.items():
    SUPPORT |= {f"trainer[{_tag}].{_field}": _entry for _field, _entry in _variant.SETTINGS.items()}
for _tag, _engine in ENGINE_VARIANTS.items():
    SUPPORT |= {f"explorer.rollout_model[{_tag}].{_field}": _entry for _field, _entry in _engine.SETTINGS.items()}
    # auxiliary models (docs/distill.md): engines of the types that can be one, with their own differences
    _aux = f"explorer.auxiliary_models[][{_tag}]"
    if _engine.AUXILIARY:
        SUPPORT[_aux] = honoured(note="the type of the local policy's engines, which starts them beside its own")
        SUPPORT |= {f"{_aux}.{_field}": _entry for _field, _entry in (_engine.SETTINGS | _engine.AUXILIARY_SETTINGS).items()}
    else:
        SUPPORT[_aux] = refused(f"an auxiliary model runs on vLLM engines; {_tag!r} engines are not started as one")

# Functions of the algorithm registries. Each function algorithms/ implements is honoured in its own module,
# and so is each of its arguments (derived below), unless an entry here says otherwise; the names Trinity
# knows that are not built are refused.
_FUNCTIONS: dict[str, dict[str, Entry]] = {
    "sample_strategy": {
        "default": read_in("tasks/train.py"),
        "warmup": read_in("tasks/train.py", note="the same as default: Trinity's warm-up data is not read here"),
        "priority": read_in("tasks/train.py"),
        "staleness_control": read_in("tasks/train.py", note="Trinity's name: default with max_staleness"),
        "mix": read_in("tasks/train.py", note="the oldest untrained experiences, plus expert rows (tasks/expert.py)"),
    },
    # Trinity's names not built (schemas/trinity/algorithms.py), each refused with why
    **{fn: {name: refused(why) for name, why in names.items()}
       for fn, names in TRINITY_NOT_BUILT_FUNCTIONS.items() if fn != "entropy_loss_fn"},
    "kl_loss_fn": {"none": read_in("algorithms/registry.py", note="is_off")},
    "kl_penalty_fn": {name: read_in("algorithms/kl.py", "algorithms/kl_penalty.py")
                      for name in KL_FNS if name != "none"},
    "entropy_loss_fn": {"none": read_in("algorithms/registry.py", note="is_off"),
                        **{name: refused(why)
                           for name, why in TRINITY_NOT_BUILT_FUNCTIONS["entropy_loss_fn"].items()}},
}
# Arguments read somewhere else than the function's own module.
_ARGS: dict[str, Entry] = {
    "sample_strategy[*].max_staleness": read_in("tasks/train.py"),
    "sample_strategy[priority].priority_fn": read_in("tasks/train.py", "buffer/experience_store.py"),
    "sample_strategy[mix].expert_data_ratio": read_in("tasks/expert.py"),
    "sample_strategy[mix].sft_dataset_name": read_in("tasks/expert.py"),
    "policy_loss_fn[*].loss_agg_mode": read_in("algorithms/loss.py", "algorithms/aggregation.py"),
    "policy_loss_fn[ppo].clip_range": read_in("algorithms/verl_compat.py"),
    "policy_loss_fn[ppo].clip_range_low": read_in("algorithms/verl_compat.py"),
    "policy_loss_fn[ppo].clip_range_high": read_in("algorithms/verl_compat.py"),
    "policy_loss_fn[ppo].clip_ratio_c": read_in("algorithms/verl_compat.py"),
    "policy_loss_fn[gspo].clip_range": read_in("algorithms/verl_compat.py"),
    "policy_loss_fn[gspo].clip_range_low": read_in("algorithms/verl_compat.py"),
    "policy_loss_fn[gspo].clip_range_high": read_in("algorithms/verl_compat.py"),
    # the mix losses' PPO part (algorithms/policy_loss/mix.py hands them to the ppo loss)
    **{f"policy_loss_fn[{_mix}].{_arg}": read_in("algorithms/verl_compat.py", "algorithms/policy_loss/ppo.py")
       for _mix in ("mix", "mix_chord") for _arg in ("clip_range", "clip_range_low", "clip_range_high", "clip_ratio_c",
                                                     "enable_sequence_masking", "delta_sequence_masking")},
    "policy_loss_fn[cispo].clip_range_low": read_in("algorithms/verl_compat.py"),
    "policy_loss_fn[cispo].clip_range_high": read_in("algorithms/verl_compat.py"),
    "policy_loss_fn[topk_distill].topk": read_in("algorithms/policy_loss/base.py", "tasks/rollouts.py"),
    "kl_loss_fn[*].kl_coef": read_in("algorithms/loss.py"),
    "kl_loss_fn[none].kl_coef": validated(note="must be 0 with 'none'"),
    "kl_loss_fn[*].adaptive": refused(ADAPTIVE_LOSS_KL),
    "kl_loss_fn[*].target_kl": refused(ADAPTIVE_LOSS_KL),
    "kl_loss_fn[*].horizon": refused(ADAPTIVE_LOSS_KL),
    "kl_penalty_fn[*].kl_coef": read_in("algorithms/kl_penalty.py"),
    "kl_penalty_fn[*].adaptive": read_in("algorithms/kl_penalty.py"),
    "kl_penalty_fn[*].target_kl": read_in("algorithms/kl_penalty.py"),
    "kl_penalty_fn[*].horizon": read_in("algorithms/kl_penalty.py"),
    "entropy_loss_fn[*].entropy_coef": read_in("algorithms/loss.py"),
    "advantage_fn[step_wise_grpo].enable_step_norm": refused(
        "a multi-turn episode is one experience here (workflows/multi_turn.py): there are no per-step experiences "
        "to divide among"),
    "entropy_loss_fn[none].entropy_coef": validated(note="must be 0 with 'none'"),
}
for _fn, _entries in _FUNCTIONS.items():
    for _name, _entry in _entries.items():
        SUPPORT[f"algorithm.{_fn}[{_name}]"] = _entry
for _key, _entry in _ARGS.items():
    SUPPORT[f"algorithm.{_key}"] = _entry

# Task sets the explorer rolls out (training and evaluation): the same fields, the same runtime.
for _ts in ("buffer.explorer_input.taskset", "buffer.explorer_input.eval_tasksets[]"):
    SUPPORT |= {
        f"{_ts}.storage_type": validated(note="task sets are read from files"),
        f"{_ts}.format.prompt_type": refused("math_workflow renders the prompt_key column as a chat; prompt_type applies "
                                             "to SFT data"),
        f"{_ts}.format.base_model_prompt": honoured().refuse_if(
            _base_prompt_outside_math_workflow, "only math_workflow writes a plain-text prompt; the other workflows "
            "chat through the chat template"),
        f"{_ts}.format.messages_key": refused(ONLY_SFT_DATA),
        f"{_ts}.format.tools_key": refused(NO_TOOLS),
        f"{_ts}.format.reply_prefix": refused(NO_REPLY_PREFIX),
        f"{_ts}.format.chosen_key": refused(PAIRS_NOT_TASKS),
        f"{_ts}.format.rejected_key": refused(PAIRS_NOT_TASKS),
        f"{_ts}.format.chat_template": refused("rollouts use model.custom_chat_template; set that instead"),
        f"{_ts}.rollout_args.logprobs": warned("engines record the sampled token's logprob only; top logprobs are not "
                                               "kept", when=lambda v, c: v is not None and v > 0),
        f"{_ts}.workflow_args": honoured(note="math_workflow takes none").refuse_if(
            _args_of_math_workflow, "math_workflow takes no workflow_args (q20, gsm8k_tool_agent and llm_judge_workflow do)"),
        f"{_ts}.generator_args": honoured(note="checked in schemas/rules.py, rows from "
                                          "buffer/generators.py"),
        f"{_ts}.default_workflow_type": _refuse_trinity_workflows(honoured()),
        f"{_ts}.default_reward_fn_type": _refuse_trinity_reward_fns(honoured(note="math_workflow checks it")).refuse_if(
            _unknown_reward_fn, f"math_workflow scores with its own reward; known: {', '.join(MATH_WORKFLOW_REWARD_FNS)}"
        ).warn_if(_trinity_math_reward, "math_workflow scores math-verify accuracy plus a format bonus for a boxed answer "
                                        "(Trinity's math_boxed_reward); math_reward's <think>/<answer> bonus is not given"),
        f"{_ts}.task_selector.feature_keys": honoured(note="every row's, checked before the run "
                                                      "(preflight/data.py)").warn_if(_no_features, NO_FEATURES),
        f"{_ts}.task_selector.harder_when": honoured().warn_if(
            _harder_when_unread, "read by offline_easy2hard and difficulty_based's prior rank only"),
        **{f"{_ts}.task_selector.kwargs.{_arg}": honoured().warn_if(
            _not_difficulty_based, "only the difficulty_based selector reads kwargs") for _arg in DifficultyArgs.model_fields},
    }
# The explorer_input default is derived into each taskset (derived values are not checked): the same rules.
SUPPORT["buffer.explorer_input.default_reward_fn_type"] = replace(
    SUPPORT["buffer.explorer_input.default_reward_fn_type"],
    rules=SUPPORT["buffer.explorer_input.taskset.default_reward_fn_type"].rules)
# Evaluation reads every task once, in file order.
SUPPORT |= {f"buffer.explorer_input.eval_tasksets[].task_selector.{_field}": warned(
    "evaluation reads every task of the eval taskset once; the order does not matter")
    for _field in TaskSelectorConfig.model_fields if _field != "kwargs"}
SUPPORT |= {key: warned("evaluation reads every task of the eval taskset once; the order does not matter")
            for key in SUPPORT if key.startswith("buffer.explorer_input.eval_tasksets[].task_selector.")}

# What the trainer reads: a dataset (SFT, mode train) or, in RL modes, the experiment's own buffer.
_EB = "buffer.trainer_input.experience_buffer"
SUPPORT |= {
    f"{_EB}.storage_type": validated(note="'file' cannot stream experiences; queue and sqlite both mean the "
                                          "experiment's SQLite buffer"),
    f"{_EB}.path": honoured().warn_if(_rl_mode, f"not used: {RL_BUFFER}"),
    f"{_EB}.subset_name": honoured().warn_if(_rl_mode, f"not used: {RL_BUFFER}"),
    f"{_EB}.split": honoured().warn_if(_rl_mode, f"not used: {RL_BUFFER}"),
    f"{_EB}.format.prompt_type[chatpair]": refused("SFT and DPO rows are 'messages' or 'plaintext' (a prompt column "
                                                   "and the response columns), as in Trinity"),
    f"{_EB}.format.response_key": honoured().warn_if(
        lambda v, c: is_preference_loss(c.algorithm.policy_loss_fn),
        "not read: a preference pair's responses are the columns format.chosen_key and format.rejected_key"),
    f"{_EB}.format.base_model_prompt": refused("SFT and DPO rows are rendered with the chat template (format.chat_template); "
                                               "a plain-text prompt is math_workflow's, for rollouts"),
    f"{_EB}.format.tools_key": refused(NO_TOOLS),
    f"{_EB}.format.reply_prefix": refused(NO_REPLY_PREFIX),
    f"{_EB}.format.workflow_key": refused(NOT_TASKS),
    f"{_EB}.format.reward_fn_key": refused(NOT_TASKS),
    f"{_EB}.format.chosen_key": honoured().warn_if(_not_preference, ONLY_PREFERENCE),
    f"{_EB}.format.rejected_key": honoured().warn_if(_not_preference, ONLY_PREFERENCE),
    f"{_EB}.rollout_args": refused(NOT_TASKS),
    f"{_EB}.workflow_args": refused(NOT_TASKS),
    f"{_EB}.reward_fn_args": refused(NOT_TASKS),
    f"{_EB}.generator_args": honoured(note="the rows of SFT data at path generator:NAME"),
    f"{_EB}.repeat_times": refused(NOT_TASKS),
    f"{_EB}.default_workflow_type": refused(NOT_TASKS),
    f"{_EB}.default_reward_fn_type": refused(NOT_TASKS),
    f"{_EB}.task_selector": refused("SFT rows are read in file order, batch after batch"),
}
# Trinity's data processor: the experience pipeline's built-in operators run on the explorer (buffer/operators.py).
_DP = "data_processor"
_EXPERIMENTAL = "Trinity's experimental pipeline buffers: the pipeline here reads the explore step's experiences and " \
                "writes the trainer's buffer"
SUPPORT |= {
    f"{_DP}.experience_pipeline.inputs": refused(_EXPERIMENTAL),
    f"{_DP}.experience_pipeline.output": refused(_EXPERIMENTAL),
    f"{_DP}.task_pipeline": refused("a Data-Juicer pipeline over the task set: Data-Juicer (py-data-juicer) is not a "
                                    "dependency here; prepare the task set before the run"),
}

# The trainer's auxiliary datasets are read by the SFT reader (tasks/sft.py) for the mix sample strategy: the same
# entries as an SFT dataset's, without the warnings of an RL mode's experience buffer (which they are not).
_AUX = "buffer.trainer_input.auxiliary_buffers"
SUPPORT[_AUX] = honoured().warn_if(
    lambda v, c: c.algorithm.sample_strategy != "mix",
    "read only by algorithm.sample_strategy 'mix' (its expert rows); no other strategy reads it")
SUPPORT |= {f"{_AUX}[]{key.removeprefix(_EB)}": replace(entry, rules=tuple(r for r in entry.rules if r.when is not _rl_mode))
            for key, entry in SUPPORT.items() if key.startswith(f"{_EB}.") and not key.endswith(("chosen_key", "rejected_key"))}
SUPPORT[f"{_AUX}[].storage_type"] = warned("an auxiliary buffer is a dataset the trainer reads (its path); the "
                                           "storage type does not matter")
SUPPORT[f"{_AUX}[].format.chosen_key"] = warned("not read: expert rows are a prompt and a response (response_key)")
SUPPORT[f"{_AUX}[].format.rejected_key"] = warned("not read: expert rows are a prompt and a response (response_key)")
# Held-out preference pairs are read by the DPO reader (tasks/dpo.py) and scored by the trainer at each evaluation:
# the entries of a DPO dataset's, less the RL-mode warnings (they are no experience buffer).
_EP = "buffer.trainer_input.eval_pairs"
SUPPORT[_EP] = honoured().warn_if(
    lambda v, c: v is not None and not stage_kind(c).trains,
    "scored by the trainer, which only a run that trains holds (mode 'both', 'colocate' or 'train')")
SUPPORT |= {f"{_EP}{key.removeprefix(_EB)}": replace(entry, rules=tuple(r for r in entry.rules if r.when not in
                                                                          (_rl_mode, _not_preference)))
            for key, entry in SUPPORT.items() if key.startswith(f"{_EB}.")}
SUPPORT[f"{_EP}.storage_type"] = warned("held-out pairs are a dataset (its path); the storage type does not matter")
SUPPORT[f"{_EP}.format.response_key"] = warned("not read: a pair's responses are format.chosen_key and "
                                                "format.rejected_key")
for _field in ("prompt_type", "prompt_key", "response_key", "system_prompt_key", "system_prompt", "messages_key",
               "chat_template"):
    SUPPORT[f"{_EB}.format.{_field}"] = SUPPORT.get(f"{_EB}.format.{_field}", honoured()).warn_if(
        _rl_mode, f"not used: {RL_BUFFER}")


SUPPORT["algorithm.algorithm_type"] = honoured(note=(
    "its preset fills the function fields; a preset without rollouts (sft, dpo) in mode train learns from a dataset "
    "(schemas/stage_kind.py), which picks the flow and the data checked"))

_VARIANT = re.compile(r"\[(?!\])[^\]]+\]")


def ancestors(key: str) -> list[str]:
    """`a.b[x].c` → [`a.b[x]`, `a.b`, `a`]: the places above a key, nearest first."""
    out = []
    for match in reversed(list(re.finditer(r"\.|\[", key))):
        parent = key[: match.start()]
        if parent and parent not in out:
            out.append(parent)
    return out


def entry_for(key: str) -> tuple[str, Entry] | None:
    """The entry that governs `key`: its own, else a refused/warned place above it, else its `[*]` form."""
    if key in SUPPORT:
        return key, SUPPORT[key]
    for parent in ancestors(key):
        entry = SUPPORT.get(parent)
        if entry is not None and entry.covers:
            return parent, entry
    generic = _VARIANT.sub("[*]", key)
    if generic != key and generic in SUPPORT:
        return generic, SUPPORT[generic]
    return None


# ----------------------------------------------------------------------------- what each trainer implements
# Function arguments each trainer backend implements itself (its loss); the optimizer's fields are the
# per_trainer() entries above.
TRAINER_FUNCTIONS = ("policy_loss_fn", "kl_loss_fn", "entropy_loss_fn")


def trainer_claims(variant: type[TrainerBase]) -> list[str]:
    """The keys of the algorithm settings `variant`'s backend implements itself: the optimizer's fields, and
    the arguments of each policy loss, KL and entropy term it runs (those refused for every trainer aside)."""
    keys = [key for key, entry in SUPPORT.items() if entry.per_trainer]
    runs = {"policy_loss_fn": variant.policy_losses(), "kl_loss_fn": variant.KL_LOSSES,
            "entropy_loss_fn": variant.ENTROPY_LOSSES}
    for fn in TRAINER_FUNCTIONS:
        registry = BUILT[fn]
        for name in registry if runs[fn] is None else [n for n in runs[fn] if n in registry]:
            for arg in registry.args[name].model_fields:
                key = f"algorithm.{fn}[{name}].{arg}"
                found = entry_for(key)
                if found is None or not found[1].covers:
                    keys.append(key)
    return keys


def trainer_entry(variant: type[TrainerBase], key: str) -> Entry:
    """How `variant`'s backend treats the setting at `key`: its ALGORITHM_SETTINGS entry (exact, or the
    `[*]` form), else, for a setting it implements, read in its MODULES; else nothing."""
    own = variant.ALGORITHM_SETTINGS
    if key in own:
        return own[key]
    generic = _VARIANT.sub("[*]", key)
    if generic in own:
        return own[generic]
    return Entry()


def _derive_function_entries() -> None:
    """Each implemented function, and each of its arguments, without an entry of its own (or a `[*]` one):
    honoured in the module that defines it (tests/test_settings_wired.py checks that module reads each)."""
    for fn, registry in BUILT.items():
        for name, args_model in registry.args.items():
            key = f"algorithm.{fn}[{name}]"
            if entry_for(key) is None:
                SUPPORT[key] = Entry(where=(registry.module_path(name),))
            for arg in args_model.model_fields:
                if entry_for(f"{key}.{arg}") is None:
                    SUPPORT[f"{key}.{arg}"] = Entry(where=(registry.module_path(name),))


_derive_function_entries()
