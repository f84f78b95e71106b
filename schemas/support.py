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

from algorithms import needs_critic
from schemas.algorithm_registry import BUILT, KL_FNS
from schemas.explorer import ENGINE_VARIANTS
from schemas.stage_kind import stage_kind
from schemas.support_buffer import buffer_entries, refuse_trinity_workflows
from schemas.trainer import TRAINER_VARIANTS, TrainerBase
from schemas.trinity.algorithms import NOT_BUILT_FUNCTIONS as TRINITY_NOT_BUILT_FUNCTIONS
from schemas.wiring import Entry, honoured, per_trainer, read_in, refused, resolved, validated, warned

if TYPE_CHECKING:
    from schemas.experiment_fields import ExperimentFields


# ----------------------------------------------------------------------------- conditions
def _wandb_missing(value: Any, config: ExperimentFields) -> bool:
    return importlib.util.find_spec("wandb") is None


# ----------------------------------------------------------------------------- reasons used more than once
# Trinity adapts the coefficient of the reward's KL penalty only (its kl_loss_fn keeps kl_coef fixed).
ADAPTIVE_LOSS_KL = ("an adaptive coefficient applies to kl_penalty_fn (KL in the reward), as in Trinity; kl_loss_fn "
                    "takes a fixed kl_coef")
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
    "buffer.explorer_input.default_workflow_type": refuse_trinity_workflows(honoured()),
    "buffer.explorer_input.default_eval_workflow_type": refuse_trinity_workflows(resolved(
        "buffer.explorer_input.eval_tasksets[].default_workflow_type")),
    "buffer.explorer_input.default_reward_fn_type": resolved("buffer.explorer_input.taskset.default_reward_fn_type"),
    "buffer.trainer_input.sft_warmup_dataset": refused(
        "Trinity's old warm-up is not run; add a first stage instead (stage_name sft_warmup, mode train, "
        "algorithm_type sft, this dataset as its buffer.trainer_input.experience_buffer), then a stage rft"),
    "buffer.trainer_input.sft_warmup_steps": refused(
        "Trinity's old warm-up is not run; use a first stage with algorithm sft and buffer.total_steps (see "
        "buffer.trainer_input.sft_warmup_dataset)"),
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

SUPPORT |= buffer_entries()
# The explorer_input default is derived into each taskset (derived values are not checked): the same rules.
SUPPORT["buffer.explorer_input.default_reward_fn_type"] = replace(
    SUPPORT["buffer.explorer_input.default_reward_fn_type"],
    rules=SUPPORT["buffer.explorer_input.taskset.default_reward_fn_type"].rules)

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
