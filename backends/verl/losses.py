"""Losses veRL's actor runs that veRL does not have: SFT on the RL batch layout, this project's policy losses, and
our whole loss where veRL's ppo_loss cannot carry it (preference pairs, expert rows).

SFT on the veRL trainer: veRL's sft_loss on the batch layout the RL steps use.

`verl.workers.utils.losses.sft_loss` expects veRL's SFT dataset layout (a jagged loss mask over the
whole sequence); our batches carry a response mask, as its ppo_loss expects. This is the same loss —
the negative log-likelihood summed over the response tokens of the whole batch, divided by their
count (`batch_num_tokens`, all-reduced over data-parallel ranks) and scaled by `dp_size` as veRL's
FSDP engine wants — read the way ppo_loss reads the batch.
"""

from __future__ import annotations

from typing import Any


def sft_response_loss(config: Any, model_output: Any, data: Any, dp_group: Any = None) -> tuple[Any, dict]:
    from verl.workers.utils.padding import no_padding_2_padding

    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    mask = data.select("response_mask").to_padded_tensor()["response_mask"].to(log_prob.dtype)
    loss = -(log_prob * mask).sum() / data["batch_num_tokens"] * data["dp_size"]
    return loss, {}


# -- this project's policy losses inside veRL's ppo_loss ---------------------------------------------------------
PREFIX = "rft_"  # veRL loss_mode of one of algorithms/policy_loss's losses: "rft_<name>"


def loss_mode(name: str) -> str:
    return f"{PREFIX}{name}"


def algorithm_loss(config: Any, model_output: Any, data: Any, dp_group: Any = None, *, name: str,
                   args: dict[str, Any]) -> tuple[Any, dict]:
    """veRL's ppo_loss (its KL and entropy terms, its aggregation over ranks) with policy loss `name` of
    algorithms/policy_loss as its loss mode: registered in veRL's registry of this process on first use (the loss
    runs in the worker processes, which import nothing of ours until then)."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
    from verl.workers.utils.losses import ppo_loss

    POLICY_LOSS_REGISTRY.setdefault(loss_mode(name), _adapter(name, args))
    return ppo_loss(config, model_output, data, dp_group)


def _adapter(name: str, args: dict[str, Any]) -> Any:
    """veRL's policy-loss signature around our loss `name` with its resolved `args`."""
    from algorithms import POLICY_LOSS_FNS, LossInputs
    from algorithms.registry import FunctionArgs

    fn = POLICY_LOSS_FNS.lookup(name)

    def policy_loss(old_log_prob: Any, log_prob: Any, advantages: Any, response_mask: Any,
                    loss_agg_mode: str = "token-mean", config: Any = None, rollout_is_weights: Any = None) -> Any:
        info = dict(getattr(config, "global_batch_info", None) or {})
        inputs = LossInputs(
            logprobs=log_prob, old_logprobs=old_log_prob, advantages=advantages,
            response_mask=response_mask.to(log_prob.dtype), global_num_tokens=info.get("batch_num_tokens"),
            global_num_seqs=info.get("global_batch_size"), dp_size=int(info.get("dp_size") or 1),
        )
        loss, metrics = fn(inputs, FunctionArgs("policy_loss_fn", name, {
            **args, "loss_agg_mode": loss_agg_mode, "loss_scale_factor": info.get("loss_scale_factor")}))
        return loss, {f"actor/{k}": v for k, v in metrics.items() if k != "pg_loss"}

    return policy_loss


# -- our whole loss: preference pairs (dpo), expert rows (the mix family) ----------------------------------------------
# compute_loss's metric names -> the names veRL's metrics carry them under (backends/verl/batch.py maps them back)
_VERL_NAMES = {"pg_loss": "actor/pg_loss", "entropy": "actor/entropy_loss", "kl_loss": "kl_loss"}
# Normalised by whole-batch counts: reported as veRL reports its own (× the data-parallel size: it sums them over
# micro-batches and averages over ranks); the rest are means of their micro-batch.
_SUMMED = {"pg_loss", "dpo_loss", "kl_loss", "entropy"}
STEP = "rft_step"  # the train step being taken (1-based), for a loss with a schedule (mix_chord's μ)
EXPERT_COUNTS = ("global_expert_tokens", "global_expert_seqs")  # the expert rows' whole-batch counts


def whole_loss(config: Any, model_output: Any, data: Any, dp_group: Any = None, *, algorithm: Any) -> tuple[Any, dict]:
    """`algorithm`'s whole loss as the torch trainer computes it (algorithms.compute_loss: the policy loss with its KL
    and entropy terms), for the losses veRL's ppo_loss cannot carry: a preference loss on (chosen, rejected) rows and
    the reference's log-probs (`ref_log_prob`; the trainer keeps pairs whole in fixed micro-batches), or a mix loss on
    sampled and expert rows (`expert_mask`, their counts and the step as non-tensor data). Padding rows (no response
    token) are left out; counts are the whole batch's (veRL's) and the loss is scaled by the data-parallel size, as
    veRL's own losses are."""
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.utils.metric import AggregationType, Metric
    from verl.workers.utils.padding import no_padding_2_padding

    from algorithms import LossInputs, compute_loss
    from backends.verl.batch import OURS

    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy", None)
    fields = [k for k in ("response_mask", "old_log_probs", "advantages", "ref_log_prob", "expert_mask") if k in data]
    tensors = data.select(*fields).to_padded_tensor()
    mask = tensors["response_mask"].to(log_prob.dtype)
    keep = mask.sum(-1) > 0
    pick = lambda key: tensors[key][keep] if key in tensors else None  # noqa: E731
    expert = pick("expert_mask")
    inputs = LossInputs(
        logprobs=log_prob[keep], old_logprobs=pick("old_log_probs").to(log_prob.dtype),
        advantages=pick("advantages").to(log_prob.dtype), response_mask=mask[keep],
        ref_logprobs=pick("ref_log_prob").to(log_prob.dtype) if "ref_log_prob" in tensors else None,
        entropy=no_padding_2_padding(entropy, data)[keep] if entropy is not None else None,
        expert_mask=expert.to(torch.bool) if expert is not None else None,
        global_num_tokens=int(data["batch_num_tokens"]), global_num_seqs=int(data["global_batch_size"]),
        step=int(tu.get_non_tensor_data(data=data, key=STEP, default=0)),
        **{key: tu.get_non_tensor_data(data=data, key=key, default=None) for key in EXPERT_COUNTS},
    )
    loss, metrics = compute_loss(algorithm, inputs)
    metrics.pop("loss")  # veRL reports the loss itself
    dp_size = data["dp_size"]
    return loss * dp_size, {
        _VERL_NAMES.get(name, f"{OURS}{name}"): Metric(value=value * dp_size, aggregation=AggregationType.SUM)
        if name in _SUMMED else Metric(value=value, aggregation=AggregationType.MEAN)
        for name, value in metrics.items()
    }
