"""Mapping from our (Trinity-named) algorithm settings to veRL 0.9.1 config objects.

The torch backend calls veRL's policy-loss functions with the ``ActorConfig`` built here; the veRL
adapter can use the same mapping so both backends train with identical settings.
"""

from __future__ import annotations

from typing import Any

from algorithms.registry import is_off

# Our policy_loss_fn / advantage_fn names -> veRL registry names (absent: veRL has no equivalent).
VERL_POLICY_LOSS = {"ppo": "vanilla", "gspo": "gspo", "cispo": "cispo"}
VERL_ADV_ESTIMATOR = {"grpo": "grpo", "rloo": "rloo", "reinforceplusplus": "reinforce_plus_plus"}


def clip_ranges(args: dict[str, Any]) -> tuple[float, float]:
    """(low, high) from Trinity's clip_range / clip_range_low / clip_range_high (the specific ones win)."""
    base = args.get("clip_range")
    low = args.get("clip_range_low")
    high = args.get("clip_range_high")
    low = base if low is None else low
    high = base if high is None else high
    if low is None or high is None:
        raise ValueError("algorithm.policy_loss_fn_args: set clip_range or both clip_range_low and clip_range_high")
    return float(low), float(high)


def actor_config(policy_loss_fn: str, args: dict[str, Any], batch_info: dict[str, Any] | None = None, **extra: Any):
    """A ``verl.workers.config.ActorConfig`` carrying the policy-loss settings veRL's loss functions read."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    low, high = clip_ranges(args)
    clip_ratio_c = float(args.get("clip_ratio_c", 3.0))
    if clip_ratio_c <= 1.0:
        raise ValueError(f"algorithm.policy_loss_fn_args.clip_ratio_c must be > 1.0 (dual clip), got {clip_ratio_c}")
    return ActorConfig(
        # strategy / rollout_n / micro batch are required by ActorConfig's validation, unused by the losses.
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        use_torch_compile=False,
        clip_ratio=float(args.get("clip_range") if args.get("clip_range") is not None else low),
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=clip_ratio_c,
        loss_agg_mode=args.get("loss_agg_mode", "token-mean"),
        loss_scale_factor=args.get("loss_scale_factor"),
        policy_loss=PolicyLossConfig(loss_mode=VERL_POLICY_LOSS.get(policy_loss_fn, policy_loss_fn)),
        global_batch_info=dict(batch_info or {}),
        **extra,
    )


def actor_overrides(algorithm) -> dict[str, Any]:
    """veRL ``actor_rollout_ref.actor`` settings equivalent to ``algorithm`` (for the veRL adapter)."""
    name = algorithm.policy_loss_fn
    if name not in VERL_POLICY_LOSS:
        raise ValueError(f"algorithm.policy_loss_fn: {name!r} has no veRL policy loss; supported: {sorted(VERL_POLICY_LOSS)}")
    from algorithms.policy_loss import POLICY_LOSS_FNS

    args = POLICY_LOSS_FNS.resolve_args(name, algorithm.policy_loss_fn_args)
    low, high = clip_ranges(args)
    kl_args = dict(getattr(algorithm, "kl_loss_fn_args", None) or {})
    ent_args = dict(getattr(algorithm, "entropy_loss_fn_args", None) or {})
    # A zero kl_coef turns the term off (no reference model), as in algorithms.needs_reference_model.
    kl_on = not is_off(getattr(algorithm, "kl_loss_fn", None)) and float(kl_args.get("kl_coef", 0.0)) != 0.0
    return {
        "policy_loss": {"loss_mode": VERL_POLICY_LOSS[name]},
        "clip_ratio_low": low,
        "clip_ratio_high": high,
        "clip_ratio_c": float(args.get("clip_ratio_c", 3.0)),
        "loss_agg_mode": args.get("loss_agg_mode", "token-mean"),
        "use_kl_loss": kl_on,
        "kl_loss_type": algorithm.kl_loss_fn if kl_on else "low_var_kl",
        "kl_loss_coef": float(kl_args.get("kl_coef", 0.0)),
        "entropy_coeff": 0.0 if is_off(getattr(algorithm, "entropy_loss_fn", None)) else float(ent_args.get("entropy_coef", 0.0)),
    }
