"""Our (Trinity-named) policy-loss arguments as the veRL 0.9.1 config object its loss functions read.

The policy losses built on veRL's ``core_algos`` (ppo, gspo, cispo) call them through ``verl_policy_loss``,
with the ``ActorConfig`` built here. (The veRL *trainer*'s own mapping of a whole config is backends/verl/config.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from algorithms.policy_loss.base import POLICY_LOSS_FNS

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


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


def actor_config(args: dict[str, Any], batch_info: dict[str, Any] | None = None, **extra: Any) -> Any:
    """A ``verl.workers.config.ActorConfig`` carrying the policy-loss settings veRL's loss functions read."""
    from verl.workers.config import ActorConfig

    low, high = clip_ranges(args)
    clip_ratio_c = float(args.get("clip_ratio_c", POLICY_LOSS_FNS.defaults("ppo")["clip_ratio_c"]))  # ppo's default
    if clip_ratio_c <= 1.0:
        raise ValueError(f"algorithm.policy_loss_fn_args.clip_ratio_c must be > 1.0 (dual clip), got {clip_ratio_c}")
    return ActorConfig(
        # strategy / rollout_n / micro batch are required by ActorConfig's validation, unused by the losses;
        # so is policy_loss.loss_mode (the name veRL's registry looks a loss up by): each loss module calls
        # its veRL function itself.
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
        global_batch_info=dict(batch_info or {}),
        **extra,
    )


def verl_policy_loss(
    compute: Callable[..., Any], inputs: LossInputs, args: dict[str, Any], **extra: Any
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss and metrics of one of veRL's ``core_algos`` policy losses over `inputs` with our arguments (`extra`:
    the keyword arguments only that loss takes). veRL names its metrics ``actor/pg_clipfrac``; we report bare names."""
    config = actor_config(args, inputs.batch_info())
    loss, metrics = compute(
        old_log_prob=inputs.old_logprobs,
        log_prob=inputs.logprobs,
        advantages=inputs.advantages,
        response_mask=inputs.response_mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
        **extra,
    )
    return loss, {"pg_loss": loss.item(), **{key.removeprefix("actor/"): float(value) for key, value in metrics.items()}}
