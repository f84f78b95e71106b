"""Trinity's flat backend names, mapped onto our one choice per side (the only place they live).

- `model.tinker: {enable: true, rank, seed, ...}` → `trainer: {trainer_type: tinker, rank, seed, ...}`
  and `explorer.rollout_model.engine_type: tinker`; with `enable: false` the block is dropped (noted).
  A `trainer_type: verl` beside it (Trinity's default, as its Tinker example writes it) is replaced too.
  Its `synchronizer.sync_method` nccl or memory becomes checkpoint (Trinity's Tinker trainer passes a
  tinker:// sampler path either way).
- a `trainer` without `trainer_type` is Trinity's default, veRL.
- veRL's `max_actor_ckpt_to_keep` (in Trinity's `trainer.trainer_config.trainer`, or written flat as
  `trainer.max_actor_ckpt_to_keep`) → `trainer.max_checkpoints_to_keep` (our pruning keeps the checkpoints).
- with a trainer that trains a critic (torch, veRL), the critic's settings in Trinity's
  `trainer.trainer_config.critic` (veRL's names: `optim.lr`, `cliprange_value`, `grad_clip`, `ppo_epochs`) and
  `trainer.trainer_config.trainer.critic_warmup` → `trainer.critic` (the same names), their one place; the rest of
  that veRL tree stays where it is (veRL merges it last; the torch trainer reports it as not imported).
- the mix family (`algorithm_type` mix / mix_chord): expert rows given as `buffer.trainer_input.sft_warmup_dataset`
  (without warm-up steps; Trinity's layout before `auxiliary_buffers`) → `auxiliary_buffers.<sft_dataset_name>`;
  the loss's per-GPU batch bookkeeping in `policy_loss_fn_args` (MIX_BATCH_ARGS) is dropped (noted).
- Trinity's workflow names that ours cover with other settings (`math_boxed_workflow`, `simple_workflow`, the
  `async_*` twins): see `schemas.trinity.workflows`.
- Trinity's experience operator `dapo_dynamic_sampling` → `algorithm.filter_groups`: see `schemas.trinity.operators`.
- `explorer.rollout_model.max_prompt_tokens` / `max_response_tokens` / `max_model_len` (the rollout engine's
  own lengths, which Trinity fills from `model.*` when unset; its older examples, dapo_math among them, set
  them there only): equal to `model.*`, they change nothing and are dropped (noted); otherwise they are
  refused naming the fix, since the engines and the trainer here share `model.*`'s lengths. Trinity does
  not run such a file either: without `model.*` lengths it stops ("Unable to determine `max_model_len`").
- `--set model.tinker.enable=true`, `--set model.tinker.rank=8` and the like are expanded the same way
  (`expand_override`).

Each mapping is noted in `derived` under a reason starting with ALIAS, which survives re-validation
(the mapped values are the user's own settings now).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import Field, ValidationError, create_model

from schemas.base import ALIAS, ConfigRuleError, Section
from schemas.errors import error_items
from schemas.trainer import DEFAULT_TRAINER_TYPE, TRAINER_VARIANTS
from schemas.trinity.names import SYNC_METHOD_ALIASES
from schemas.trinity.operators import map_operators
from schemas.trinity.workflows import map_workflows

# Trinity's `model.tinker` block (an alias: its values land in the `trainer` section): `enable`, and these settings of
# the Tinker trainer under the same names, checked as the trainer checks them.
TINKER_BLOCK = ("base_model", "rank", "seed", "train_mlp", "train_attn", "train_unembed")
TrinityTinkerConfig = create_model(
    "TrinityTinkerConfig", __base__=Section, __doc__="Trinity's `model.tinker` block.",
    enable=(bool, Field(False, description="Train and sample on the Tinker service.")),
    **{key: (TRAINER_VARIANTS["tinker"].model_fields[key].annotation, TRAINER_VARIANTS["tinker"].model_fields[key])
       for key in TINKER_BLOCK},
)


def apply_aliases(data: dict[str, Any], note: bool = True, refused: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """A copy of raw config data with Trinity's backend flags mapped (see the module docstring);
    `note`: record the mappings in `derived` (a stage has no `derived` of its own). Settings of a mapped
    workflow that are not built raise ConfigRuleError, or, given `refused`, are left out and added to it
    as (path, why) (the importer lists them with the other refused settings)."""
    data = copy.deepcopy(data)
    notes: dict[str, str] = {}
    model = data.get("model")
    if isinstance(model, dict) and "tinker" in model:
        _tinker(data, model.pop("tinker"), notes)
    trainer = data.get("trainer")
    if isinstance(trainer, dict) and "trainer_type" not in trainer:
        trainer["trainer_type"] = DEFAULT_TRAINER_TYPE
    if isinstance(trainer, dict):
        _checkpoints_to_keep(trainer, notes)
        _critic(trainer, notes)
    _mix(data, notes)
    _gigpo_info_keys(data, notes)
    map_workflows(data, notes)
    if problems := [*map_operators(data, notes), *_rollout_lengths(data, notes)]:
        if refused is None:
            raise ConfigRuleError(problems)
        refused += problems
    if notes and note:
        data["derived"] = {**(data.get("derived") or {}), **notes}
    return data


# Trinity's GiGPO reads each step experience's own info["step_reward"] and info["env_state_hash"]; an episode here
# records one list of each (algorithms/advantage/gigpo.py).
GIGPO_INFO_KEYS = {"step_reward_key": {"step_reward": "turn_rewards"},
                   "env_state_hash_key": {"env_state_hash": "step_states"}}


def _gigpo_info_keys(data: dict[str, Any], notes: dict[str, str]) -> None:
    alg = data.get("algorithm")
    args = alg.get("advantage_fn_args") if isinstance(alg, dict) else None
    if not isinstance(args, dict):
        return
    for key, names in GIGPO_INFO_KEYS.items():
        value = args.get(key)
        if isinstance(value, str) and value in names:
            args[key] = names[value]
            notes[f"algorithm.advantage_fn_args.{key}"] = (f"{ALIAS}Trinity's info key {value!r}: an episode here "
                                                           f"records the list {names[value]!r}")


# Trinity's length settings of the rollout engine (its InferenceModelConfig), each filled from model.<key> when unset.
ROLLOUT_LENGTHS = ("max_model_len", "max_prompt_tokens", "max_response_tokens")
SHARED_LENGTHS = "the engines and the trainer here share model's lengths"


def _rollout_lengths(data: dict[str, Any], notes: dict[str, str]) -> list[tuple[str, str]]:
    """Take Trinity's rollout-engine lengths out of `data` (module docstring); return the refused ones as (path, why)."""
    explorer = data.get("explorer")
    rollout = explorer.get("rollout_model") if isinstance(explorer, dict) else None
    if not isinstance(rollout, dict):
        return []
    model = data.get("model")
    problems = []
    for key in ROLLOUT_LENGTHS:
        if key not in rollout:
            continue
        value, path = rollout.pop(key), f"explorer.rollout_model.{key}"
        given = model.get(key) if isinstance(model, dict) else getattr(model, key, None)
        if value is None or value == given:  # None: Trinity's default, model's own
            notes[path] = f"{ALIAS}dropped: the same as model.{key}, which the engines read here"
        elif given is None:
            problems.append((path, f"{value}: the rollout engine's own length, which Trinity fills from model.{key}; "
                                   f"{SHARED_LENGTHS}: set model.{key}: {value} instead (Trinity needs model's lengths "
                                   "too: without them it stops with 'Unable to determine `max_model_len`')"))
        else:
            problems.append((path, f"{value} differs from model.{key} ({given}); {SHARED_LENGTHS}: set model.{key} to "
                                   "the one you want"))
    return problems


# The mix losses' arguments that split Trinity's per-GPU micro-batches between expert and sampled rows; each part is
# normalised over its own rows of the whole batch here (algorithms/policy_loss/mix.py), whatever the split.
MIX_BATCH_ARGS = ("use_dynamic_bsz", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "ngpus_trainer",
                  "gradient_accumulation", "read_batch_size_usual", "read_batch_size_expert", "train_batch_size_usual",
                  "train_batch_size_expert", "repeat_times")


def _mix(data: dict[str, Any], notes: dict[str, str]) -> None:
    """The mix family as Trinity writes it: expert rows in `sft_warmup_dataset` (its layout before
    `auxiliary_buffers`, still that of its mix examples) → `auxiliary_buffers.<sft_dataset_name>`; the loss's
    per-GPU batch bookkeeping (MIX_BATCH_ARGS) is dropped."""
    alg = data.get("algorithm")
    if not isinstance(alg, dict) or alg.get("algorithm_type") not in ("mix", "mix_chord"):
        return
    args = alg.get("policy_loss_fn_args")
    for key in [k for k in MIX_BATCH_ARGS if isinstance(args, dict) and k in args]:
        del args[key]
        notes[f"algorithm.policy_loss_fn_args.{key}"] = (
            f"{ALIAS}dropped: Trinity's per-GPU split of the batch between expert and sampled rows; here each part "
            "is normalised over its own rows of the whole batch")
    trainer_input = (data.get("buffer") or {}).get("trainer_input")
    if not isinstance(trainer_input, dict) or not trainer_input.get("sft_warmup_dataset") \
            or trainer_input.get("sft_warmup_steps"):
        return
    name = (alg.get("sample_strategy_args") or {}).get("sft_dataset_name", "sft_dataset")
    auxiliary = trainer_input.setdefault("auxiliary_buffers", {})
    if name not in auxiliary:
        auxiliary[name] = trainer_input.pop("sft_warmup_dataset")
        auxiliary[name].pop("algorithm_type", None)  # Trinity's tag of the file's rows (sft): what they are here
        notes[f"buffer.trainer_input.auxiliary_buffers.{name}"] = (
            f"{ALIAS}buffer.trainer_input.sft_warmup_dataset: the mix sample strategy's expert rows (Trinity's "
            "layout before auxiliary_buffers)")


def _checkpoints_to_keep(trainer: dict[str, Any], notes: dict[str, str]) -> None:
    """veRL's max_actor_ckpt_to_keep → trainer.max_checkpoints_to_keep (None, veRL's "keep all", is our default)."""
    found: list[tuple[str, Any]] = []
    if "max_actor_ckpt_to_keep" in trainer:
        found.append(("trainer.max_actor_ckpt_to_keep", trainer.pop("max_actor_ckpt_to_keep")))
    tree = trainer.get("trainer_config")
    verl_trainer = tree.get("trainer") if isinstance(tree, dict) else None
    if isinstance(verl_trainer, dict) and "max_actor_ckpt_to_keep" in verl_trainer:
        found.append(("trainer.trainer_config.trainer.max_actor_ckpt_to_keep", verl_trainer.pop("max_actor_ckpt_to_keep")))
        if not verl_trainer:
            del tree["trainer"]
        if not tree:
            del trainer["trainer_config"]
    problems = []
    for path, value in found:
        if value is None:
            continue
        if trainer.get("max_checkpoints_to_keep", value) != value:
            problems.append((path, f"{value!r} contradicts trainer.max_checkpoints_to_keep: {trainer['max_checkpoints_to_keep']!r}"))
            continue
        trainer["max_checkpoints_to_keep"] = value
        notes["trainer.max_checkpoints_to_keep"] = f"{ALIAS}{path}"
    if problems:
        raise ConfigRuleError(problems)


# Trinity's (veRL's) critic settings that `trainer.critic` has, under the same names.
CRITIC_KEYS = (("optim", "lr"), ("cliprange_value",), ("grad_clip",), ("ppo_epochs",))


def _critic(trainer: dict[str, Any], notes: dict[str, str]) -> None:
    """trainer.trainer_config.critic.{optim.lr, cliprange_value, grad_clip, ppo_epochs} and
    trainer.trainer_config.trainer.critic_warmup → trainer.critic, for a trainer that trains a critic."""
    tree = trainer.get("trainer_config")
    verl_critic = tree.get("critic") if isinstance(tree, dict) else None
    kind = trainer.get("trainer_type")
    variant = TRAINER_VARIANTS.get(kind) if isinstance(kind, str) else None  # a wrong value is the schema's to name
    if variant is None or "critic" not in variant.provides() or not isinstance(verl_critic, dict):
        return
    ours = trainer.setdefault("critic", {})
    problems = []
    for keys in CRITIC_KEYS:
        holder = verl_critic
        for key in keys[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if not isinstance(holder, dict) or keys[-1] not in holder:
            continue
        value, path = holder.pop(keys[-1]), ".".join(keys)
        target = ours
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        if keys[-1] in target and target[keys[-1]] != value:
            problems.append((f"trainer.trainer_config.critic.{path}", f"{value!r} contradicts trainer.critic.{path}: "
                             f"{target[keys[-1]]!r}"))
            continue
        target[keys[-1]] = value
        notes[f"trainer.critic.{path}"] = f"{ALIAS}trainer.trainer_config.critic.{path}"
    verl_trainer = tree.get("trainer")
    if isinstance(verl_trainer, dict) and "critic_warmup" in verl_trainer:  # veRL keeps it in its trainer section
        value = verl_trainer.pop("critic_warmup")
        if ours.get("critic_warmup", value) != value:
            problems.append(("trainer.trainer_config.trainer.critic_warmup", f"{value!r} contradicts "
                             f"trainer.critic.critic_warmup: {ours['critic_warmup']!r}"))
        else:
            ours["critic_warmup"] = value
            notes["trainer.critic.critic_warmup"] = f"{ALIAS}trainer.trainer_config.trainer.critic_warmup"
    if problems:
        raise ConfigRuleError(problems)
    _prune_empty(tree)
    if not tree:
        del trainer["trainer_config"]


def _prune_empty(tree: dict[str, Any]) -> None:
    """Drop the mappings left empty (deepest first)."""
    for key in list(tree):
        if isinstance(tree[key], dict):
            _prune_empty(tree[key])
            if not tree[key]:
                del tree[key]


def _tinker(data: dict[str, Any], block: Any, notes: dict[str, str]) -> None:
    try:
        tinker = TrinityTinkerConfig.model_validate(block or {})
    except ValidationError as exc:
        raise ConfigRuleError([(f"model.tinker.{path}", msg) for path, msg in error_items(exc)]) from None
    if not tinker.enable:
        notes["model.tinker"] = f"{ALIAS}model.tinker.enable is false: its settings are not used"
        return
    trainer = data.setdefault("trainer", {})
    if not isinstance(trainer, dict):  # a TrainerConfig instance
        trainer = trainer.model_dump(exclude_unset=True)
        data["trainer"] = trainer
    problems = []
    # Trinity's default trainer_type (veRL), written out as Trinity's own Tinker example does, is what the
    # Tinker block replaces there too; another backend is a contradiction.
    if trainer.get("trainer_type", "tinker") not in ("tinker", DEFAULT_TRAINER_TYPE):
        problems.append(("trainer.trainer_type", f"{trainer['trainer_type']!r} contradicts model.tinker.enable: true (use 'tinker')"))
    trainer["trainer_type"] = "tinker"
    for key in sorted(tinker.model_fields_set - {"enable"}):
        value = getattr(tinker, key)
        if key in trainer and trainer[key] != value:
            problems.append((f"trainer.{key}", f"{trainer[key]!r} contradicts model.tinker.{key}: {value!r}"))
        trainer[key] = value
    explorer = data.setdefault("explorer", {})
    if isinstance(explorer, dict):
        rollout = explorer.setdefault("rollout_model", {})
        if isinstance(rollout, dict):
            if rollout.get("engine_type", "tinker") != "tinker":
                problems.append(("explorer.rollout_model.engine_type",
                                 f"{rollout['engine_type']!r} contradicts model.tinker.enable: true (use 'tinker')"))
            rollout["engine_type"] = "tinker"
    if problems:
        raise ConfigRuleError(problems)
    notes["trainer.trainer_type"] = f"{ALIAS}model.tinker.enable is true"
    notes["explorer.rollout_model.engine_type"] = f"{ALIAS}model.tinker.enable is true"
    _tinker_sync_method(data, notes)


def _tinker_sync_method(data: dict[str, Any], notes: dict[str, str]) -> None:
    """Trinity's Tinker trainer hands the explorer a tinker:// sampler path whichever way it syncs: it turns
    nccl into checkpoint, and 'memory' passes that path through the synchronizer. Ours moves the path
    with sync_method checkpoint, so both become that."""
    sync = data.get("synchronizer")
    method = sync.get("sync_method") if isinstance(sync, dict) else None
    if SYNC_METHOD_ALIASES.get(method, method) in ("nccl", "memory"):
        sync["sync_method"] = "checkpoint"
        notes["synchronizer.sync_method"] = (f"{ALIAS}{method!r} with model.tinker.enable: true: Tinker weights move as "
                                             "tinker:// sampler paths (Trinity passes the same path for nccl and memory)")


def expand_override(path: str, value: Any) -> dict[str, Any]:
    """`{path: value}` with alias paths replaced by what they mean (other paths unchanged)."""
    if path == "model.tinker.enable":
        if value is not True:
            raise ConfigRuleError([(path, "only `true` can be set here (Trinity's flag); to leave Tinker, set "
                                          "trainer.trainer_type and explorer.rollout_model.engine_type")])
        return {"trainer.trainer_type": "tinker", "explorer.rollout_model.engine_type": "tinker"}
    if path.startswith("model.tinker."):
        key = path.removeprefix("model.tinker.")
        if key not in TrinityTinkerConfig.model_fields:
            raise ConfigRuleError([(path, f"not a setting of model.tinker; its settings: {', '.join(TrinityTinkerConfig.model_fields)}")])
        return {f"trainer.{key}": value}
    return {path: value}
