"""Cross-field rules of `ExperimentConfig`: derived values and contradictions (the data's in schemas/rules_buffer.py,
the engines' in schemas/rules_explorer.py; this module runs them all, in order).

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

from algorithms import is_preference_loss, teacher_topk
from algorithms.needs import needs_critic, needs_greedy_baseline, needs_groups, needs_teacher
from algorithms.registry import is_off
from schemas import read_trace, support_check
from schemas.algorithm_registry import ALGORITHM_PRESETS, FUNCTION_REGISTRIES
from schemas.base import ADJUSTED, set_unmarked
from schemas.resolver import Resolver
from schemas.rules_buffer import buffer_rules, data_processor_rules
from schemas.rules_explorer import explorer_rules
from schemas.secrets import redact, tinker_url_problem
from schemas.stage_kind import stage_kind
from schemas.trainer import TRAINER_VARIANTS
from schemas.trinity.algorithms import REFUSED_TYPES as TRINITY_REFUSED_TYPES

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
        r.config.trainer.check_needs(r, TRAINER_VARIANTS)  # what the algorithm's pieces need, against what it provides
        _synchronizer(r)
        buffer_rules(r)
        explorer_rules(r)
        _monitor(r)
    data_processor_rules(r)
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
            r.args_errors(f"algorithm.{args_field}", f"{fn_field} {name!r}", args_model, exc)
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
    """Settings the runtime does not honour, listed in a `SETTINGS` entry: refused (an error naming the
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
