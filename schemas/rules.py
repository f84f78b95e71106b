"""Cross-field rules of `ExperimentConfig`: derived values and contradictions.

Each rule reads the whole config and either
- derives a value the user left unset (recorded in `config.derived` as path → reason),
- refuses a contradiction (an error naming every field involved), or
- records a warning (`config.warnings`) for a setting that has no effect.
A value the user set is never changed, with two documented exceptions, both shown in `derived`:
`synchronizer.sync_method` in a mode without an explorer (nothing to synchronise) becomes `checkpoint`,
and `explorer.eval_interval` that is not a multiple of `synchronizer.sync_interval` is rounded down to
one, as Trinity does (also a warning).

Only rules that belong to no backend live here. What a backend can and cannot run is its settings
class's (schemas/trainer.py, schemas/explorer.py): this module asks the chosen trainer and engine for
their facts (`trainer.SYNC_METHODS`, ...) and runs their `check`, never comparing a backend's name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError

from algorithms import POLICY_LOSS_FNS, is_preference_loss, teacher_topk, uses_expert_rows
from algorithms.advantage.gigpo import STEP_STATE_WORKFLOWS
from algorithms.needs import needs_critic, needs_greedy_baseline, needs_groups, needs_steps, needs_teacher
from algorithms.registry import is_off
from schemas import read_trace, support_check
from schemas.algorithm_registry import ALGORITHM_PRESETS, FUNCTION_REGISTRIES
from schemas.base import ADJUSTED, set_unmarked
from schemas.buffer import FormatConfig, StorageConfig, TasksetConfig
from schemas.data_processor import DATA_JUICER, OPERATOR_ARGS
from schemas.generators import GENERATOR_ARGS, generator_name, same_held_out
from schemas.resolver import Resolver
from schemas.rewards import RewardArgsError, dapo_overlong_args, reasoning_gym_answer_format, step_arg
from schemas.secrets import is_loopback, redact, tinker_url_problem
from schemas.stage_kind import stage_kind
from schemas.trinity.algorithms import REFUSED_TYPES as TRINITY_REFUSED_TYPES
from schemas.trinity.operators import NOT_BUILT as TRINITY_OPERATORS_NOT_BUILT
from schemas.trinity.workflows import NOT_BUILT as TRINITY_WORKFLOWS_NOT_BUILT

if TYPE_CHECKING:
    from schemas.experiment_fields import ExperimentFields


def apply_rules(config: ExperimentFields) -> None:
    """Run every rule in dependency order; raise ConfigRuleError listing all problems found."""
    with read_trace.validating():  # what the rules read through algorithms/ is no evidence of the runtime's reads
        _apply_rules(Resolver(config))


def _apply_rules(r: Resolver[ExperimentFields]) -> None:
    _mode(r)
    _algorithm(r)
    if not r.errors:  # later rules need the resolved algorithm
        _model(r)
        r.config.trainer.check(r, r.config.explorer.rollout_model)  # the chosen trainer backend's own rules (schemas/trainer.py)
        r.config.trainer.check_needs(r)  # what the algorithm's pieces need, against what the backend provides
        _synchronizer(r)
        _buffer(r)
        _explorer(r)
        _monitor(r)
    _data_processor(r)
    _addresses(r)
    _support(r)  # always: a refused setting is named even when another error stopped the rules
    r.raise_if_errors()


def _addresses(r: Resolver[ExperimentFields]) -> None:
    """No credentials in the config's addresses (a config is a Prefect parameter, MLflow params and an
    artifact); a Tinker key goes over plain http only to this machine, or to the host named in $TINKER_PLAIN_HTTP_HOST."""
    c = r.config
    fields = {"monitor.tracking_uri": c.monitor.tracking_uri, "cluster.ray_address": c.cluster.ray_address,
              "trainer.base_url": getattr(c.trainer, "base_url", None)}
    for path, value in fields.items():
        if value and redact(value) != value:
            r.error(path, f"{redact(value)!r} carries credentials, and a config is recorded (Prefect parameters, MLflow "
                          "params): give them through the environment (MLFLOW_TRACKING_USERNAME and "
                          "MLFLOW_TRACKING_PASSWORD, the Tinker Secret block) instead")
    url = fields["trainer.base_url"]
    if url and (problem := tinker_url_problem(url)):
        r.error("trainer.base_url", problem)


# ----------------------------------------------------------------------------- mode
# Why sync_method memory cannot cross GPUs (validation here, and the pre-flight once the GPUs are counted).
MEMORY_SYNC_ON_GPUS = ("'memory' on GPUs pushes over CUDA IPC, which needs each engine on the trainer's own GPU; "
                       "{where} the engines and the trainer each have their own: use nccl (the default on GPUs), "
                       "checkpoint, or mode 'colocate' on one GPU")
COLOCATE_ON_GPUS = ("on GPUs, colocate shares one GPU between one vLLM engine (tensor_parallel_size 1, vLLM's "
                    "sleep mode while the trainer steps) and the torch trainer")
# The engine's share of a GPU it shares with the trainer, unless explorer.rollout_model.gpu_memory_utilization is set:
# the rest holds the trainer's weights, gradients and Adam state while the engine sleeps (its memory given back).
COLOCATED_ENGINE_MEMORY = 0.45


def _mode(r: Resolver[ExperimentFields]) -> None:
    """Mode colocate: explorer and trainer share the devices, so they take turns (the in-turns plan of mode both)."""
    c = r.config
    kind = stage_kind(c)
    if kind.shares_devices:
        if c.cluster.gpu_per_node:
            rollout = c.explorer.rollout_model
            if c.trainer.DEVICES_IN_WORKERS:
                r.error("trainer.trainer_type", f"'colocate' with cluster.gpu_per_node {c.cluster.gpu_per_node} and "
                                                f"trainer_type {c.trainer.trainer_type!r}: {COLOCATE_ON_GPUS}; veRL's "
                                                "workers hold whole GPUs of their own (use mode 'both')")
            elif rollout.HOLDS_GPUS and rollout.gpus() != 1:
                r.error("explorer.rollout_model.engine_num", f"'colocate' on GPUs: {COLOCATE_ON_GPUS}; engine_num × "
                                                             f"tensor_parallel_size is {rollout.gpus()} (use mode 'both')")
            elif rollout.HOLDS_GPUS and not rollout.is_set("gpu_memory_utilization"):
                r.derive(rollout, "gpu_memory_utilization", COLOCATED_ENGINE_MEMORY,
                         "explorer.rollout_model.gpu_memory_utilization",
                         "mode 'colocate' on a GPU: the trainer holds the rest of it")
        if c.synchronizer.sync_style != "fixed" or c.synchronizer.sync_offset != 0:
            r.error("synchronizer.sync_offset" if c.synchronizer.sync_offset else "synchronizer.sync_style",
                    "mode 'colocate' takes turns on shared devices: sync_style 'fixed' with sync_offset 0 (the sides "
                    "cannot overlap)")
    if kind.flow == "bench" and not c.buffer.explorer_input.eval_tasksets:
        r.error("buffer.explorer_input.eval_tasksets", "mode 'bench' evaluates checkpoints: give at least one eval taskset")


# ----------------------------------------------------------------------------- algorithm
def _algorithm(r: Resolver[ExperimentFields]) -> None:
    alg = r.config.algorithm
    preset = ALGORITHM_PRESETS.get(alg.algorithm_type)
    if alg.algorithm_type in TRINITY_REFUSED_TYPES:  # Trinity's, not built: refused with why
        r.error("algorithm.algorithm_type", f"{alg.algorithm_type!r}: {TRINITY_REFUSED_TYPES[alg.algorithm_type]}")
        return
    if preset is None:
        r.error("algorithm.algorithm_type", f"unknown algorithm {alg.algorithm_type!r}; known: {sorted(ALGORITHM_PRESETS)}")
        return
    for key, value in preset.defaults.items():
        if getattr(alg, key) is None:
            r.derive(alg, key, value, f"algorithm.{key}", f"preset of algorithm_type {alg.algorithm_type!r}")
    for fn_field, registry in FUNCTION_REGISTRIES.items():
        name = getattr(alg, fn_field)
        args_field = f"{fn_field}_args"
        if name not in registry:
            r.error(f"algorithm.{fn_field}", f"unknown {fn_field} {name!r}; known: {sorted(registry)}")
            continue
        given = dict(getattr(alg, args_field) or {})
        if args_field in preset.args and name == preset.defaults.get(fn_field):
            for key, value in preset.args[args_field].items():
                if key not in given:
                    given[key] = value
                    r.config.derived[f"algorithm.{args_field}.{key}"] = f"preset of algorithm_type {alg.algorithm_type!r}"
        args_model = registry[name]
        try:
            validated = args_model.model_validate(given)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"])
                if err["type"] == "extra_forbidden":
                    msg = f"{fn_field} {name!r} has no argument {loc!r}; its arguments: {sorted(args_model.model_fields)}"
                else:
                    msg = err["msg"]
                r.error(f"algorithm.{args_field}.{loc}", msg)
            continue
        resolved = validated.model_dump()
        for key in resolved:
            if key not in given:
                r.config.derived[f"algorithm.{args_field}.{key}"] = f"default of {fn_field} {name!r}"
        set_unmarked(alg, args_field, resolved)
        if not given:
            r.config.derived.pop(f"algorithm.{args_field}", None)
    if r.errors:
        return
    # PPO-style clip ranges: None low/high mean "use clip_range"; show the value actually used.
    ploss = alg.policy_loss_fn_args
    if "clip_range_low" in ploss and "clip_range_high" in ploss:
        for side in ("clip_range_low", "clip_range_high"):
            if ploss[side] is None:
                if ploss.get("clip_range") is None:
                    r.error(f"algorithm.policy_loss_fn_args.{side}", "set it or clip_range")
                else:
                    ploss[side] = ploss["clip_range"]
                    r.config.derived[f"algorithm.policy_loss_fn_args.{side}"] = "clip_range"
    for fn_field, coef in (("kl_loss_fn", "kl_coef"), ("kl_penalty_fn", "kl_coef"), ("entropy_loss_fn", "entropy_coef")):
        args = getattr(alg, f"{fn_field}_args")
        if getattr(alg, fn_field) == "none" and args.get(coef, 0.0) != 0.0:
            r.error(f"algorithm.{fn_field}_args.{coef}",
                    f"{coef}={args[coef]} has no effect with algorithm.{fn_field} 'none'; choose a {fn_field} or set 0")
        if args.get("adaptive") and (args.get("target_kl") is None or args.get("horizon") is None):
            r.error(f"algorithm.{fn_field}_args.adaptive", "adaptive KL needs target_kl and horizon")
    strategy_args = alg.sample_strategy_args or {}
    if (not is_off(alg.kl_penalty_fn) and needs_groups(alg) and alg.sample_strategy == "priority"
            and strategy_args.get("priority_fn") == "largest_advantage"):
        # The trainer re-makes the group advantages from the penalised rewards: it needs whole groups.
        r.error("algorithm.kl_penalty_fn", f"with advantage_fn {alg.advantage_fn!r} the KL penalty re-computes group "
                "advantages on the trainer, which needs whole groups in a batch; sample_strategy 'priority' with "
                "priority_fn 'largest_advantage' splits them (use priority_fn 'newest' or sample_strategy 'default')")
    if needs_teacher(alg) and not is_off(alg.kl_penalty_fn) and alg.kl_penalty_fn_args.get("kl_coef", 0.0):
        r.error("algorithm.kl_penalty_fn", f"{alg.kl_penalty_fn!r}: advantage_fn {alg.advantage_fn!r} takes its "
                "advantages from the teacher, not from rewards, so a KL penalty in the reward would change nothing; "
                "use kl_loss_fn (KL to the reference in the loss)")
    if needs_greedy_baseline(alg) and not is_off(alg.kl_penalty_fn) and alg.kl_penalty_fn_args.get("kl_coef", 0.0):
        r.error("algorithm.kl_penalty_fn", f"{alg.kl_penalty_fn!r}: the KL penalty re-computes the advantages on the "
                "trainer, where remax's baseline (each task's greedy answer, sampled on the explorer) is not; use "
                "kl_loss_fn (KL to the reference in the loss)")
    if teacher_topk(alg.policy_loss_fn, alg.policy_loss_fn_args) and not needs_teacher(alg):
        r.error("algorithm.policy_loss_fn", f"{alg.policy_loss_fn!r} learns from a teacher's top-k log-probs, which "
                "the explorer scores only for a teacher's advantage_fn: set advantage_fn 'on_policy_distill' (or "
                "algorithm_type on_policy_distill) and the teacher in explorer.auxiliary_models")
    if alg.repeat_times is None:  # no preset value (cannot happen for built-ins); keep the type promise
        r.derive(alg, "repeat_times", 1, "algorithm.repeat_times", "no preset group size")
    if alg.filter_groups.enable is None:
        r.derive(alg.filter_groups, "enable", preset.filter_groups, "algorithm.filter_groups.enable",
                 f"preset of algorithm_type {alg.algorithm_type!r}")
    kind = stage_kind(r.config)
    if alg.filter_groups.enable and alg.repeat_times < 2 and kind.explores:
        r.error("algorithm.filter_groups.enable", "dynamic sampling keeps groups whose rewards differ; with "
                f"repeat_times {alg.repeat_times} every group has one response and would be dropped (set ≥ 2)")
    if needs_groups(alg) and alg.repeat_times < 2 and kind.explores:
        r.error("algorithm.repeat_times",
                f"advantage_fn {alg.advantage_fn!r} compares responses within a group; repeat_times must be ≥ 2 "
                f"(got {alg.repeat_times})")
    if alg.algorithm_type == "dpo" and not kind.from_dataset:  # dpo's preset has no rollout: mode train only
        r.error("mode", f"algorithm.algorithm_type 'dpo' learns from a preference dataset; mode must be 'train' "
                        f"(got {r.config.mode!r})")
    elif is_preference_loss(alg.policy_loss_fn) and not kind.from_dataset:
        r.error("algorithm.policy_loss_fn", f"{alg.policy_loss_fn!r} learns from preference pairs of a dataset, not "
                f"from rollouts: use it with mode 'train' and algorithm_type 'dpo' (got mode {r.config.mode!r}, "
                f"algorithm_type {alg.algorithm_type!r})")


# ----------------------------------------------------------------------------- model
def _model(r: Resolver[ExperimentFields]) -> None:
    m = r.config.model
    if not m.model_path:
        r.error("model.model_path", "required: a Hugging Face model id or a local folder")
    p, q, total = m.max_prompt_tokens, m.max_response_tokens, m.max_model_len
    if p is not None and q is not None and total is not None and p + q > total:
        r.error("model.max_model_len",
                f"model.max_prompt_tokens + model.max_response_tokens ({p} + {q}) exceed model.max_model_len ({total})")
        return
    if total is None:
        if p is None or q is None:
            r.error("model.max_model_len",
                    "cannot be derived: set it, or both model.max_prompt_tokens and model.max_response_tokens")
            return
        r.derive(m, "max_model_len", p + q, "model.max_model_len", "max_prompt_tokens + max_response_tokens")
        total = p + q
    if p is None and q is None:
        r.derive(m, "max_prompt_tokens", total // 2, "model.max_prompt_tokens", "half of max_model_len")
        r.derive(m, "max_response_tokens", total - total // 2, "model.max_response_tokens", "max_model_len - max_prompt_tokens")
    elif p is None:
        if q >= total:
            r.error("model.max_response_tokens", f"must be below model.max_model_len ({total}) to leave room for a prompt")
            return
        r.derive(m, "max_prompt_tokens", total - q, "model.max_prompt_tokens", "max_model_len - max_response_tokens")
    elif q is None:
        if p >= total:
            r.error("model.max_prompt_tokens", f"must be below model.max_model_len ({total}) to leave room for a response")
            return
        r.derive(m, "max_response_tokens", total - p, "model.max_response_tokens", "max_model_len - max_prompt_tokens")
    if m.min_response_tokens > m.max_response_tokens:
        r.error("model.min_response_tokens",
                f"{m.min_response_tokens} exceeds model.max_response_tokens ({m.max_response_tokens})")
    if m.critic_model_path is None and needs_critic(r.config.algorithm):
        r.derive(m, "critic_model_path", m.model_path, "model.critic_model_path", "model_path (the critic starts from the policy)")
    if m.lora_configs is not None and len(m.lora_configs) > 1:
        r.error("model.lora_configs", f"at most one LoRA adapter is supported (got {len(m.lora_configs)})")


# ----------------------------------------------------------------------------- synchronizer
def _synchronizer(r: Resolver[ExperimentFields]) -> None:
    c = r.config
    s = c.synchronizer
    kind = stage_kind(c)
    if not kind.together:
        if s.sync_method != "checkpoint":
            r.derive(s, "sync_method", "checkpoint", "synchronizer.sync_method",
                     f"mode {c.mode!r} runs explorer and trainer apart: weights move only through checkpoints"
                     + (f" (was {s.sync_method!r})" if s.is_set("sync_method") else ""))
        return
    trainer = c.trainer
    uses_lora = c.model.lora_configs is not None
    if s.sync_method == "nccl":
        reason = None
        if "nccl" not in trainer.SYNC_METHODS:
            dropped = c.derived.get("synchronizer.sync_method", "")
            reason = f"trainer_type is {trainer.trainer_type!r}: its weights {trainer.WEIGHTS_NOTE}" + (
                f" ({dropped.split('dropped ', 1)[-1].split(':')[0]} dropped)" if "dropped" in dropped else "")
        elif uses_lora:
            reason = "model.lora_configs is set (adapters are loaded from checkpoints)"
        elif c.cluster.gpu_per_node == 0 and not s.is_set("sync_method"):
            # on CPU one node's engines load fastest from /dev/shm; an explicit nccl broadcasts over gloo
            reason = "cluster.gpu_per_node is 0 (no NCCL: memory, or an explicit nccl broadcasts over gloo)"
        if reason:
            if s.is_set("sync_method"):
                r.error("synchronizer.sync_method", f"'nccl' cannot be used: {reason}; use checkpoint"
                        + (" or memory" if c.cluster.gpu_per_node == 0 else ""))
            else:
                memory = c.cluster.gpu_per_node == 0 and "memory" in trainer.SYNC_METHODS and not uses_lora
                r.derive(s, "sync_method", "memory" if memory else "checkpoint", "synchronizer.sync_method",
                         f"default 'nccl' impossible: {reason}")
    if s.sync_method == "memory":
        if c.cluster.gpu_per_node and not kind.shares_devices:
            r.error("synchronizer.sync_method",
                    MEMORY_SYNC_ON_GPUS.format(where=f"with cluster.gpu_per_node {c.cluster.gpu_per_node}"))
        if c.cluster.node_num is not None and c.cluster.node_num > 1:
            r.error("synchronizer.sync_method",
                    f"'memory' writes weights into the engines' local folder; it needs cluster.node_num 1 "
                    f"(got {c.cluster.node_num})")
        if "memory" not in trainer.SYNC_METHODS:
            r.error("synchronizer.sync_method", f"'memory' cannot move the weights of trainer_type "
                                                f"{trainer.trainer_type!r}: they {trainer.WEIGHTS_NOTE}; leave it unset or use "
                                                "checkpoint")
    total = c.buffer.total_steps
    if total is not None:
        if s.sync_interval > total:
            r.error("synchronizer.sync_interval",
                    f"{s.sync_interval} exceeds buffer.total_steps ({total}): the explorer would never get new weights")
        if s.sync_offset >= total:
            r.error("synchronizer.sync_offset", f"{s.sync_offset} must be below buffer.total_steps ({total})")
    if s.sync_offset > 0 and s.sync_style != "fixed":
        r.error("synchronizer.sync_offset", f"only meaningful with synchronizer.sync_style 'fixed' (got {s.sync_style!r})")
    max_staleness = (c.algorithm.sample_strategy_args or {}).get("max_staleness")
    if max_staleness is not None and s.sync_style == "fixed" and max_staleness < s.sync_offset + s.sync_interval - 1:
        r.error("algorithm.sample_strategy_args.max_staleness",
                f"{max_staleness} is below the staleness sync_offset + sync_interval - 1 = "
                f"{s.sync_offset + s.sync_interval - 1} that synchronizer settings give every step: nothing would be trained")
    if c.buffer.explorer_input.eval_tasksets and c.explorer.eval_interval % s.sync_interval != 0:
        # evaluations happen right after a sync: Trinity (IntervalConfigValidator) rounds down to a multiple of
        # sync_interval, at least one, and warns; so do we, so that Trinity's own examples run as they do there
        given = c.explorer.eval_interval
        rounded = max(given // s.sync_interval, 1) * s.sync_interval
        r.derive(c.explorer, "eval_interval", rounded, "explorer.eval_interval",
                 f"{ADJUSTED}{given} rounded to a multiple of synchronizer.sync_interval ({s.sync_interval}), as Trinity does")
        r.warn(f"explorer.eval_interval: {given} is not a multiple of synchronizer.sync_interval ({s.sync_interval}): "
               f"evaluating every {rounded} steps instead (evaluations happen right after a sync; Trinity rounds the same way)")


# ----------------------------------------------------------------------------- buffer
def _buffer(r: Resolver[ExperimentFields]) -> None:
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


def _generator_args(r: Resolver[ExperimentFields], ts: TasksetConfig, path: str) -> None:
    """A generated taskset's arguments, checked and completed with the generator's defaults."""
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
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                msg = f"generator {name!r} has no argument {loc!r}; its arguments: {sorted(args_model.model_fields)}"
            else:
                msg = err["msg"].removeprefix("Value error, ")
            r.error(f"{path}.generator_args.{loc}", msg)
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
    if ti.sft_warmup_steps and ti.sft_warmup_dataset is None:
        r.error("buffer.trainer_input.sft_warmup_dataset",
                f"required when buffer.trainer_input.sft_warmup_steps is {ti.sft_warmup_steps}")


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


def _data_processor(r: Resolver[ExperimentFields]) -> None:
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


def _pair_columns(r: Resolver[ExperimentFields], fmt: FormatConfig, path: str) -> None:
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


# ----------------------------------------------------------------------------- explorer, monitor
# An auxiliary model's engine settings it leaves unset are the rollout model's (on CPU, vLLM's default memory
# share would take 90 % of the machine's RAM for each engine).
ENGINE_SETTINGS_SHARED = ("gpu_memory_utilization", "kv_cache_memory_gb", "dtype", "enforce_eager",
                          "enable_prefix_caching", "enable_chunked_prefill")
def _explorer(r: Resolver[ExperimentFields]) -> None:
    c = r.config
    e = c.explorer
    # the chosen engine's own rules (schemas/explorer.py), first: what they derive is shared
    e.rollout_model.check(r, e.auxiliary_models, c.trainer)
    for i, aux in enumerate(e.auxiliary_models):
        if not aux.model_path:
            r.error(f"explorer.auxiliary_models.{i}.model_path", "required for an auxiliary model")
        if type(aux) is type(e.rollout_model):  # what it leaves unset is as the rollout engines run (memory, dtype)
            for name in ENGINE_SETTINGS_SHARED:
                if name in type(aux).model_fields and name not in aux.model_fields_set:
                    r.derive(aux, name, getattr(e.rollout_model, name), f"explorer.auxiliary_models.{i}.{name}",
                             f"explorer.rollout_model.{name}")
        if not aux.AUXILIARY:
            r.error(f"explorer.auxiliary_models.{i}.engine_type", f"an auxiliary model runs on vLLM engines; "
                    f"{aux.engine_type!r} engines are not started as auxiliary models")
    if e.auxiliary_models and not e.rollout_model.AUXILIARY:
        r.error("explorer.auxiliary_models", f"auxiliary models start beside a local policy's vLLM engines; the "
                f"{e.rollout_model.engine_type!r} policy samples on its service and starts none")
    names = [aux.auxiliary_name() for aux in e.auxiliary_models if aux.model_path]
    if len(set(names)) != len(names):
        r.error("explorer.auxiliary_models", f"two auxiliary models share a name ({', '.join(names)}): set `name` on each")
    if needs_teacher(c.algorithm) and stage_kind(c).explores and not e.auxiliary_models:
        r.error("explorer.auxiliary_models", f"algorithm.advantage_fn {c.algorithm.advantage_fn!r} learns from a "
                "teacher's log-probs: list the teacher here (its model_path; the first auxiliary model is the teacher)")
    _openai_api(r)


def _openai_api(r: Resolver[ExperimentFields]) -> None:
    """The endpoint on the rollout engines (enable_openai_api) and what depends on it."""
    c = r.config
    rollout = c.explorer.rollout_model
    path = "explorer.rollout_model"
    if stage_kind(c).flow == "serve" and not rollout.enable_openai_api:
        if rollout.is_set("enable_openai_api"):
            r.error(f"{path}.enable_openai_api", "mode 'serve' serves the endpoint: it cannot be false")
        else:
            r.derive(rollout, "enable_openai_api", True, f"{path}.enable_openai_api", "mode 'serve' serves the endpoint")
    if rollout.enable_history and not rollout.enable_openai_api:
        r.error(f"{path}.enable_history", "records the calls of the endpoint: set enable_openai_api: true too")
    if rollout.enable_openai_api and not rollout.openai_api_key_secret and not is_loopback(rollout.openai_api_host):
        r.error(f"{path}.openai_api_host",
                f"{rollout.openai_api_host!r} is reachable from other machines and the endpoint has no API key: set "
                f"{path}.openai_api_key_secret (a Prefect Secret block's name, or 'env:VAR'), or bind 127.0.0.1")
    if rollout.enable_auto_tool_choice and not rollout.tool_call_parser:
        r.error(f"{path}.tool_call_parser", "required by enable_auto_tool_choice (the model's format, e.g. 'hermes')")
    if not rollout.enable_openai_api:
        unused = [f for f in ("enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "openai_api_port")
                  if rollout.is_set(f) and getattr(rollout, f)]
        if unused:
            r.warn(f"{', '.join(f'{path}.{f}' for f in unused)} take effect only with {path}.enable_openai_api: true")


def _monitor(r: Resolver[ExperimentFields]) -> None:
    mon = r.config.monitor
    if mon.experiment_name is None:
        r.derive(mon, "experiment_name", r.config.project, "monitor.experiment_name", "project")
    if mon.gate is not None and stage_kind(r.config).trains:
        taskset = mon.gate.metric.split("/", 1)[0]
        names = [ts.name for ts in r.config.buffer.explorer_input.eval_tasksets]
        if taskset not in names:
            r.error("monitor.gate.metric", f"the gate compares the final evaluation of eval taskset {taskset!r}, which this "
                    f"experiment does not evaluate (its eval tasksets: {', '.join(names) or 'none'})")


# ----------------------------------------------------------------------------- what the runtime does not honour
def _support(r: Resolver[ExperimentFields]) -> None:
    """Settings the runtime does not honour, listed in schemas/support.py: refused (an error naming the
    field and why) or warned (`warnings`). Inside `support_check.collecting()` (the Trinity import) refusals are
    recorded there instead of raised, so that every one can be listed."""
    collected = support_check.collect_mode()
    prefix = support_check.current_prefix()
    for finding in support_check.scan(r.config):
        if finding.level == "warn":
            r.warn(f"{finding.path}: {finding.message}")
        elif collected is not None:
            collected.append(support_check.Finding(prefix + finding.path, finding.key, finding.level, finding.reason))
        else:
            r.error(finding.path, finding.message)
    if collected is not None:
        collected.extend(support_check.Finding(prefix + f.path, f.key, f.level, f.reason)
                         for f in support_check.scan(r.config) if f.level == "warn")
