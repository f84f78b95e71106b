"""Our experiment config → veRL 0.9.1's config tree, and the tree → the workers' engine configs.

`verl_tree` is the one mapping: veRL's own full default tree (`_generated_ppo_trainer.yaml`, so its
interpolations resolve) with every setting of ours written onto it, and `trainer.trainer_config`
(Trinity's raw veRL tree) merged last. Only `actor_rollout_ref` is read (the actor, the reference
model and the log-prob micro-batch sizes of `rollout`; our rollout is vLLM on our side), and `critic` when
advantage_fn 'ppo' needs one.
`worker_configs` turns that subtree into the `TrainingWorkerConfig`s the engine workers take, as
veRL's ActorRolloutRefWorker.init_model does (verl/workers/engine_workers.py:538-647) without its
rollout and checkpoint engine.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from algorithms import POLICY_LOSS_FNS, has_kl_term, needs_critic
from algorithms.registry import FunctionArgs, args_of, is_off
from algorithms.verl_compat import clip_ranges
from backends.trainer import scoring_temperature
from backends.verl.losses import loss_mode as adapted_mode
from checkpointing.models import resolve_model_path
from schemas.trainer import VerlTrainerConfig

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from schemas import ExperimentConfig

_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# Both of Trinity's optimizer names mean decoupled weight decay: veRL's AdamW (torch.optim.AdamW).
_OPTIMIZERS = {"adam": "AdamW", "adamw": "AdamW"}
# What a checkpoint holds: never "hf_model" — it would write huggingface/model.safetensors (for LoRA a
# peft-named unmerged state dict), which our convert flow takes for an already converted step.
SAVE_CONTENTS = ["model", "optimizer", "extra"]


def max_token_len(config: ExperimentConfig) -> int:
    """Token budget per micro-batch with use_dynamic_bsz (trainer.max_token_len_per_gpu, else 2 × the
    context length, so any single experience fits)."""
    return config.trainer.max_token_len_per_gpu or 2 * int(config.model.max_model_len)


def attn_implementation(setting: str, use_gpu: bool) -> str:
    """auto: flash_attention_2 on GPUs when the flash_attn package is there (veRL's default), else sdpa."""
    if setting != "auto":
        return setting
    return "flash_attention_2" if use_gpu and importlib.util.find_spec("flash_attn") is not None else "sdpa"


def special_token_ids(model_dir: Path | str) -> dict[str, int]:
    """The model's own bos/eos/pad token ids. veRL overwrites the model config's with the tokenizer's
    (HFModelConfig.__post_init__, verl/workers/config/model.py:204-220): the pad id decides which
    embedding row gets no gradient (padding_idx) and the config is saved with every checkpoint."""
    path = Path(model_dir) / "config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    return {key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id") if config.get(key) is not None}


def verl_overrides(config: ExperimentConfig, model_dir: Path | str, total_steps: int, use_gpu: bool) -> dict[str, Any]:
    """The `actor_rollout_ref` settings our config maps to (before `trainer.trainer_config`)."""
    trainer = config.trainer
    if not isinstance(trainer, VerlTrainerConfig):
        raise ValueError(f"trainer.trainer_type is {trainer.trainer_type!r}, not 'verl'")
    algorithm = config.algorithm
    opt = algorithm.optimizer
    param_dtype = trainer.param_dtype if trainer.param_dtype != "auto" else ("bfloat16" if use_gpu else "float32")
    compile_ = trainer.use_torch_compile if trainer.use_torch_compile is not None else use_gpu
    fsdp = {
        "strategy": trainer.strategy,
        "model_dtype": _DTYPES[trainer.model_dtype],
        "mixed_precision": {"param_dtype": _DTYPES[param_dtype], "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
        "fsdp_size": trainer.fsdp_size,
        "param_offload": trainer.param_offload,
        "optimizer_offload": trainer.optimizer_offload,
        "ulysses_sequence_parallel_size": trainer.ulysses_sequence_parallel_size,
        "use_torch_compile": compile_,
        "seed": trainer.seed,
    }
    micro = trainer.micro_batch_size
    tokens = max_token_len(config)

    def optim(lr: float, clip_grad: float) -> dict[str, Any]:
        """veRL's optimizer section: AdamW with the policy's schedule, betas, eps and weight decay (the critic's too)."""
        return {
            "optimizer": _OPTIMIZERS[opt.optimizer_type],
            "optimizer_impl": "torch.optim",
            "lr": lr,
            "betas": list(opt.betas),
            "weight_decay": opt.weight_decay,
            "clip_grad": clip_grad,
            "lr_warmup_steps": opt.lr_warmup_steps,
            "lr_warmup_steps_ratio": opt.lr_warmup_steps_ratio,
            "lr_scheduler_type": opt.lr_scheduler_type,
            "min_lr_ratio": opt.min_lr_ratio,
            "total_training_steps": max(int(total_steps), 1),
            "override_optimizer_config": {"eps": opt.eps},  # FSDPOptimizerConfig has no eps field
        }

    log_prob_sizes = {
        "log_prob_micro_batch_size_per_gpu": micro,
        "log_prob_use_dynamic_bsz": trainer.use_dynamic_bsz,
        "log_prob_max_token_len_per_gpu": tokens,
    }
    lora = (config.model.lora_configs or [None])[0]
    model: dict[str, Any] = {
        "path": str(model_dir),
        "custom_chat_template": config.model.custom_chat_template,
        "use_remove_padding": trainer.use_remove_padding,
        "enable_gradient_checkpointing": trainer.gradient_checkpointing,
        "override_config": {
            "attn_implementation": attn_implementation(trainer.attn_implementation, use_gpu),
            **special_token_ids(model_dir),
        },
        "lora_rank": lora.lora_rank if lora else 0,
        # merged weights out of get_per_tensor_param (veRL's own sync path) when it is used
        "lora": {"merge": True},
    }
    if lora:
        model.update(lora_alpha=lora.lora_alpha, target_modules=lora.target_modules, lora_adapter_path=lora.path)
    # veRL's ppo_loss reads these; the SFT and preference losses are ours and read none of them
    own_loss = is_sft(config) or VerlTrainerConfig.runs_whole(algorithm.policy_loss_fn)
    loss = _sft_overrides(algorithm) if own_loss else actor_overrides(algorithm)
    # veRL's critic (advantage_fn 'ppo'): a value-model engine with its own model, optimizer and lr
    sections = {"critic": _critic_section(config, model_dir, model, fsdp, optim)} if needs_critic(algorithm) else {}
    return {
        **sections,
        "actor_rollout_ref": {
            "model": model,
            "actor": {
                **loss,
                "clip_ratio": loss["clip_ratio_low"],
                "loss_scale_factor": _loss_scale_factor(algorithm),
                "strategy": trainer.strategy,
                "ppo_mini_batch_size": int(config.buffer.train_batch_size or 1),  # one optimizer step per train step
                "ppo_micro_batch_size_per_gpu": micro,
                "use_dynamic_bsz": trainer.use_dynamic_bsz,
                "ppo_max_token_len_per_gpu": tokens,
                "ppo_epochs": 1,
                "shuffle": False,
                "ulysses_sequence_parallel_size": trainer.ulysses_sequence_parallel_size,
                "use_torch_compile": compile_,
                "grad_clip": trainer.grad_clip,  # read by veRL's trainer; the engine reads optim.clip_grad
                "optim": optim(opt.lr, trainer.grad_clip),
                "fsdp_config": fsdp,
                "checkpoint": {"save_contents": SAVE_CONTENTS, "load_contents": SAVE_CONTENTS},
            },
            "ref": {
                "strategy": trainer.strategy,
                "ulysses_sequence_parallel_size": trainer.ulysses_sequence_parallel_size,
                "use_torch_compile": compile_,
                "fsdp_config": {**fsdp, "forward_only": True, "param_offload": False, "optimizer_offload": False},
                **log_prob_sizes,
            },
            "rollout": {"n": int(algorithm.repeat_times or 1), "temperature": scoring_temperature(config), **log_prob_sizes},
        }
    }


def _critic_section(config: ExperimentConfig, model_dir: Path | str, model: dict[str, Any], fsdp: dict[str, Any],
                    optim: Any) -> dict[str, Any]:  # noqa: ANN401
    """veRL's `critic` section: the actor's model settings (without its adapter) on model.critic_model_path, the
    actor's FSDP and batching, and trainer.critic's optimizer, value clip and epochs."""
    trainer, critic = config.trainer, config.trainer.critic
    path = str(resolve_model_path(config.model.critic_model_path)) if config.model.critic_model_path else str(model_dir)
    return {
        "strategy": trainer.strategy,
        "model": {
            **{k: v for k, v in model.items() if k not in ("lora_alpha", "target_modules", "lora_adapter_path")},
            "path": path, "lora_rank": 0,
            "override_config": {**model["override_config"], **special_token_ids(path)},
        },
        "optim": optim(critic.optim.lr, critic.grad_clip),
        "fsdp": fsdp,
        "ppo_mini_batch_size": int(config.buffer.train_batch_size or 1),
        "ppo_micro_batch_size_per_gpu": trainer.micro_batch_size,
        "use_dynamic_bsz": trainer.use_dynamic_bsz,
        "ppo_max_token_len_per_gpu": max_token_len(config),
        "ppo_infer_max_token_len_per_gpu": max_token_len(config),
        "ppo_infer_micro_batch_size_per_gpu": trainer.micro_batch_size,
        "ppo_epochs": critic.ppo_epochs,
        "shuffle": False,
        "cliprange_value": critic.cliprange_value,
        "loss_agg_mode": "token-mean",  # the torch critic's (algorithms.value_loss)
        "grad_clip": critic.grad_clip,
        "ulysses_sequence_parallel_size": trainer.ulysses_sequence_parallel_size,
        "checkpoint": {"save_contents": SAVE_CONTENTS, "load_contents": SAVE_CONTENTS},
    }


SFT_LOSS = "sft"  # VerlTrainerConfig.LOSS_MODES's name of veRL's sft loss (the others are ppo_loss modes)
# ppo's clip settings (its arguments' defaults), which veRL's actor config must hold even when the loss has none
PPO_DEFAULTS = POLICY_LOSS_FNS.defaults("ppo")


def is_sft(config: ExperimentConfig) -> bool:
    """SFT trains with veRL's sft loss (token-mean NLL of the response, backends/verl/losses.py), not ppo_loss."""
    return VerlTrainerConfig.LOSS_MODES.get(config.algorithm.policy_loss_fn) == SFT_LOSS


def actor_overrides(algorithm: Any) -> dict[str, Any]:
    """veRL ``actor_rollout_ref.actor`` loss settings equivalent to ``algorithm`` (its ppo_loss reads them)."""
    name = algorithm.policy_loss_fn
    loss_mode = VerlTrainerConfig.LOSS_MODES.get(name) or (adapted_mode(name) if VerlTrainerConfig.adapted(name) else None)
    if loss_mode is None or loss_mode == SFT_LOSS:
        raise ValueError(f"algorithm.policy_loss_fn: {name!r} has no veRL policy loss for ppo_loss; "
                         f"supported: {sorted(VerlTrainerConfig.policy_losses())}")
    # a loss without clip ranges (topr, opmd, ...: ours, as the loss mode) leaves ppo's defaults, which veRL never reads
    args = FunctionArgs("policy_loss_fn", name, {**PPO_DEFAULTS, **POLICY_LOSS_FNS.resolve_args(name, algorithm.policy_loss_fn_args)})
    low, high = clip_ranges(args)
    kl_args = args_of(algorithm, "kl_loss_fn")
    ent_args = args_of(algorithm, "entropy_loss_fn")
    kl_on = has_kl_term(algorithm)  # a zero kl_coef turns the term off (no reference model)
    return {
        "policy_loss": {"loss_mode": loss_mode},
        "clip_ratio_low": low,
        "clip_ratio_high": high,
        "clip_ratio_c": float(args["clip_ratio_c"]),
        "loss_agg_mode": args.get("loss_agg_mode", "token-mean"),
        "use_kl_loss": kl_on,
        "kl_loss_type": algorithm.kl_loss_fn if kl_on else "low_var_kl",
        "kl_loss_coef": float(kl_args.get("kl_coef", 0.0)),
        "entropy_coeff": 0.0 if is_off(getattr(algorithm, "entropy_loss_fn", None)) else float(ent_args.get("entropy_coef", 0.0)),
    }


def _sft_overrides(algorithm: Any) -> dict[str, Any]:
    """The actor's loss settings under SFT or a preference loss: no clipping, KL or entropy term of veRL's (our
    losses read none of these; a preference loss's own KL and entropy terms are algorithms.compute_loss's)."""
    return {
        "policy_loss": {"loss_mode": "vanilla"},
        "clip_ratio_low": PPO_DEFAULTS["clip_range"],
        "clip_ratio_high": PPO_DEFAULTS["clip_range"],
        "clip_ratio_c": PPO_DEFAULTS["clip_ratio_c"],
        "loss_agg_mode": args_of(algorithm, "policy_loss_fn").get("loss_agg_mode", "token-mean"),
        "use_kl_loss": False,
        "kl_loss_type": "low_var_kl",
        "kl_loss_coef": 0.0,
        "entropy_coeff": 0.0,
    }


def _loss_scale_factor(algorithm: Any) -> float | None:
    return (algorithm.policy_loss_fn_args or {}).get("loss_scale_factor")


def verl_tree(config: ExperimentConfig, model_dir: Path | str, total_steps: int, use_gpu: bool) -> DictConfig:
    """veRL's default tree ← our settings ← trainer.trainer_config (Trinity's raw veRL settings)."""
    import verl
    from omegaconf import OmegaConf

    base = OmegaConf.load(Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml")
    ours = OmegaConf.create(verl_overrides(config, model_dir, total_steps, use_gpu))
    return OmegaConf.merge(base, ours, OmegaConf.create(config.trainer.trainer_config or {}))


@dataclass
class WorkerConfigs:
    """What one engine worker process builds: the actor, and the reference model when KL needs one."""

    actor: Any  # verl.workers.config.TrainingWorkerConfig
    loss_fn: Any  # functools.partial(verl.workers.utils.losses.ppo_loss, config=actor's ActorConfig)
    ref: Any | None  # TrainingWorkerConfig of a forward-only engine, or None
    use_kl_loss: bool
    is_lora: bool
    critic: Any | None = None  # TrainingWorkerConfig of the value model (advantage_fn 'ppo'), or None
    critic_loss_fn: Any | None = None  # functools.partial(verl.workers.utils.losses.value_loss, config=its CriticConfig)


def worker_configs(
    tree: DictConfig, sft: bool = False, reference: bool | None = None, ref_model_path: str | None = None,
    algorithm: Any = None,
) -> WorkerConfigs:
    """The `actor_rollout_ref` subtree as engine configs (verl/workers/engine_workers.py:538-647);
    the loss is veRL's ppo_loss (with `algorithm`'s policy loss as its mode when veRL has none of that name), or
    its sft loss when `sft`. A reference engine is built when `reference`
    (None: when the KL loss is on), from `ref_model_path` (None: the actor's starting model)."""
    from omegaconf import OmegaConf, open_dict
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import TrainingWorkerConfig

    arr = tree.actor_rollout_ref
    model_config = omega_conf_to_dataclass(arr.model)
    actor = omega_conf_to_dataclass(arr.actor)
    actor.model_config = model_config
    def worker(role: Any, model: Any = model_config) -> TrainingWorkerConfig:  # the actor's model unless given
        return TrainingWorkerConfig(model_type="language_model", model_config=model,
                                    engine_config=role.engine, optimizer_config=role.optim,
                                    checkpoint_config=role.checkpoint)

    actor_worker = worker(actor)
    engine = actor_worker.engine_config
    engine.use_dynamic_bsz = actor.use_dynamic_bsz
    engine.max_token_len_per_gpu = actor.ppo_max_token_len_per_gpu
    engine.micro_batch_size_per_gpu = actor.ppo_micro_batch_size_per_gpu
    engine.infer_max_token_len_per_gpu = arr.rollout.log_prob_max_token_len_per_gpu
    engine.infer_micro_batch_size_per_gpu = arr.rollout.log_prob_micro_batch_size_per_gpu
    engine.use_remove_padding = model_config.use_remove_padding
    if actor.use_dynamic_bsz != arr.rollout.log_prob_use_dynamic_bsz:  # as veRL asserts (engine_workers.py:616)
        raise ValueError("actor_rollout_ref.actor.use_dynamic_bsz and rollout.log_prob_use_dynamic_bsz must agree")

    is_lora = model_config.lora_rank > 0
    ref_worker = None
    if reference is None:
        reference = bool(actor.use_kl_loss)
    if reference and not is_lora:  # LoRA: the base model is the actor with its adapter off
        ref_tree = OmegaConf.create(OmegaConf.to_container(arr.ref, resolve=True))
        with open_dict(ref_tree):  # the renames of engine_workers.py:545-553
            ref_tree.ppo_mini_batch_size = arr.actor.ppo_mini_batch_size
            ref_tree.ppo_micro_batch_size = ref_tree.pop("log_prob_micro_batch_size", None)
            ref_tree.ppo_micro_batch_size_per_gpu = ref_tree.pop("log_prob_micro_batch_size_per_gpu", None)
            ref_tree.use_dynamic_bsz = ref_tree.pop("log_prob_use_dynamic_bsz", False)
            ref_tree.ppo_max_token_len_per_gpu = ref_tree.pop("log_prob_max_token_len_per_gpu", None)
        ref = omega_conf_to_dataclass(ref_tree)
        ref.model_config = model_config
        if ref_model_path:  # model.ref_model_path: another model than the actor's start
            ref.model_config = omega_conf_to_dataclass(OmegaConf.merge(arr.model, {"path": ref_model_path}))
        ref_worker = worker(ref, ref.model_config)
        ref_engine = ref_worker.engine_config
        ref_engine.use_dynamic_bsz = ref.use_dynamic_bsz
        ref_engine.infer_max_token_len_per_gpu = ref.ppo_max_token_len_per_gpu
        ref_engine.infer_micro_batch_size_per_gpu = ref.ppo_micro_batch_size_per_gpu
        ref_engine.use_remove_padding = model_config.use_remove_padding
    critic, critic_loss = _critic_worker(tree) if "critic" in tree and algorithm is not None and needs_critic(algorithm) \
        else (None, None)
    return WorkerConfigs(
        actor=actor_worker,
        loss_fn=_loss_fn(actor, sft, algorithm),
        ref=ref_worker,
        use_kl_loss=bool(actor.use_kl_loss),
        is_lora=is_lora,
        critic=critic,
        critic_loss_fn=critic_loss,
    )


def _critic_worker(tree: DictConfig) -> tuple[Any, Any]:
    """The `critic` subtree as a value-model engine config and its loss (veRL's value_loss), as veRL's
    RayPPOTrainer.init_workers makes them (verl/trainer/ppo/ray_trainer.py:798-830)."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import TrainingWorkerConfig
    from verl.workers.utils.losses import value_loss

    critic = omega_conf_to_dataclass(tree.critic)
    engine = critic.engine
    engine.use_dynamic_bsz = critic.use_dynamic_bsz
    engine.max_token_len_per_gpu = critic.ppo_max_token_len_per_gpu
    engine.infer_max_token_len_per_gpu = critic.ppo_infer_max_token_len_per_gpu
    engine.micro_batch_size_per_gpu = critic.ppo_micro_batch_size_per_gpu
    engine.infer_micro_batch_size_per_gpu = critic.ppo_infer_micro_batch_size_per_gpu
    engine.use_remove_padding = critic.model.use_remove_padding
    worker = TrainingWorkerConfig(model_type="value_model", model_config=critic.model, engine_config=engine,
                                  optimizer_config=critic.optim, checkpoint_config=critic.checkpoint)
    return worker, partial(value_loss, config=critic)


def _loss_fn(actor: Any, sft: bool, algorithm: Any) -> Any:
    """veRL's ppo_loss (its own loss mode, or one of ours: backends/verl/losses.py), or the SFT loss."""
    from verl.workers.utils.losses import ppo_loss

    from backends.verl.losses import algorithm_loss, sft_response_loss, whole_loss

    if sft:
        return partial(sft_response_loss, config=actor)
    name = getattr(algorithm, "policy_loss_fn", None)
    if VerlTrainerConfig.runs_whole(name):
        return partial(whole_loss, config=actor, algorithm=algorithm)
    if VerlTrainerConfig.adapted(name):
        args = POLICY_LOSS_FNS.resolve_args(name, algorithm.policy_loss_fn_args)
        return partial(algorithm_loss, config=actor, name=name, args=args)
    return partial(ppo_loss, config=actor)


def kl_needs_reference(config: ExperimentConfig) -> bool:
    return not is_off(getattr(config.algorithm, "kl_loss_fn", None))
