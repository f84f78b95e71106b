"""Our algorithm's loss as Tinker computes it: experiences → `Datum`s, and which loss runs where.

Tinker's built-in losses sum over every datum and token: `Σ_t w_t · f(ratio_t, A_t)` (hosted semantics;
the local server is patched to match, scripts/tinker_server/README.md). Our losses aggregate tokens
with `loss_agg_mode` (veRL's agg_loss), which is linear in the per-token loss, so it equals that sum
with per-token coefficients c_t (`aggregation_weights`). The built-in policy losses are homogeneous in
the advantage (f(r, c·A) = c·f(r, A) for c ≥ 0), so c_t goes into the advantages; cross_entropy takes
it as its weights. Hence, exactly:

    policy_loss_fn        runs as                          per-token input
    importance_sampling   importance_sampling              advantages A·c_t
    ppo                   ppo (clip thresholds 1-ε_low,    advantages A·c_t   (Tinker's ppo has no dual
                          1+ε_high)                                           clip: clip_ratio_c unused)
    cispo                 cispo (same thresholds)          advantages A·c_t
    sft                   cross_entropy                    weights c_t
    opmd                  cross_entropy                    weights A·c_t/(1+τ)   (-A·log p, Trinity's OPMD)
    anything else, ppo with sequence masking, or trainer.loss_fn custom:
                          forward_backward_custom running algorithms.compute_loss on the trainer's logprobs

(The built-ins are TinkerTrainerConfig.BUILTIN_LOSSES in schemas/trainer.py, the one list of them.)

Datums: model_input = prompt + response[:-1], targets shifted by one; prompt positions get zero
weight/advantage. On the local (JAX) server every new tensor shape costs a compile, so the number of
datums is padded with zero-weight copies (`padded_count`: a multiple of PAD_DATUMS, or a power of two).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from algorithms.verl_compat import clip_ranges
from buffer.experience import Experience
from schemas.trainer import TinkerTrainerConfig

PAD_DATUMS = 8  # = train_micro_batch_size that scripts/tinker-server.sh gives the local server


@dataclass(frozen=True)
class LossPlan:
    """How one train step's loss runs on Tinker."""

    policy_loss_fn: str
    tinker_loss: str | None  # the built-in loss, or None: forward_backward_custom
    config: dict[str, float] | None = None  # loss_fn_config of ppo/cispo

    @property
    def custom(self) -> bool:
        return self.tinker_loss is None


def plan(algorithm: Any, loss_fn: str = "auto") -> LossPlan:
    """The loss of `algorithm` on Tinker (`loss_fn`: trainer.loss_fn, auto or custom or a built-in name)."""
    name = algorithm.policy_loss_fn
    args = policy_args(algorithm)
    builtin = TinkerTrainerConfig.builtin_loss(algorithm, loss_fn)
    if builtin is None:
        return LossPlan(name, None)
    config = None
    if name in ("ppo", "cispo"):
        low, high = clip_ranges(args)  # args with the loss's defaults filled in
        config = {"clip_low_threshold": 1.0 - float(low), "clip_high_threshold": 1.0 + float(high)}
    return LossPlan(name, builtin, config)


def policy_args(algorithm: Any) -> dict[str, Any]:
    from algorithms import POLICY_LOSS_FNS

    return POLICY_LOSS_FNS.resolve_args(algorithm.policy_loss_fn, algorithm.policy_loss_fn_args)


def aggregation_weights(algorithm: Any, masks: list[list[float]]) -> list[list[float]]:
    """c_t of each response token: our aggregated loss of a per-token loss L equals Σ c_t·L_t."""
    from algorithms import LossInputs
    from algorithms.aggregation import aggregate

    width = max((len(m) for m in masks), default=0)
    if width == 0:
        return [[] for _ in masks]
    mask = torch.tensor([m + [0.0] * (width - len(m)) for m in masks], dtype=torch.float32)
    per_token = torch.zeros_like(mask, requires_grad=True)
    args = policy_args(algorithm)
    inputs = LossInputs(
        logprobs=per_token, old_logprobs=torch.zeros_like(mask), advantages=torch.zeros_like(mask),
        response_mask=mask, global_num_tokens=int(mask.sum()), global_num_seqs=int((mask.sum(-1) > 0).sum()),
    )
    aggregate(per_token, inputs, args.get("loss_agg_mode", "token-mean"), args.get("loss_scale_factor")).backward()
    grads = per_token.grad if per_token.grad is not None else torch.zeros_like(mask)
    return [grads[i, : len(m)].tolist() for i, m in enumerate(masks)]


def response_mask(exp: Experience) -> list[float]:
    return [float(x) for x in (exp.response_mask or [1] * len(exp.response_token_ids))]


def datum(exp: Experience, inputs: dict[str, list[float]]) -> Any:
    """One Datum: prompt + response shifted by one; `inputs` are per response token (zero on the prompt)."""
    from tinker import types

    tokens = list(exp.prompt_token_ids) + list(exp.response_token_ids)
    prompt_targets = len(exp.prompt_token_ids) - 1
    loss_fn_inputs: dict[str, Any] = {"target_tokens": tokens[1:]}
    for key, values in inputs.items():
        loss_fn_inputs[key] = [0.0] * prompt_targets + [float(v) for v in values]
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=loss_fn_inputs)


def step_inputs(plan_: LossPlan, algorithm: Any, batch: list[Experience]) -> list[dict[str, list[float]]]:
    """Per-token loss_fn_inputs of each experience for `plan_` (the custom loss needs only targets)."""
    masks = [response_mask(e) for e in batch]
    if plan_.custom:
        return [{"weights": m} for m in masks]
    coef = aggregation_weights(algorithm, masks)
    out = []
    for exp, c in zip(batch, coef, strict=True):
        advantage = float(exp.advantage or 0.0)
        if plan_.policy_loss_fn == "sft":
            out.append({"weights": c})
        elif plan_.policy_loss_fn == "opmd":
            tau = float(policy_args(algorithm).get("tau", 1.0))
            out.append({"weights": [advantage * x / (1.0 + tau) for x in c]})
        else:
            out.append({"logprobs": list(exp.logprobs), "advantages": [advantage * x for x in c]})
    return out


def padded_count(count: int, multiple: int) -> int:
    """Datums to send for `count`: a multiple of `multiple` (the server's micro-batch), or below it the
    next power of two — a few shapes, each compiled once, without 8× the work for a single datum."""
    if multiple <= 1 or count <= 0:
        return count
    if count >= multiple:
        return -(-count // multiple) * multiple
    return 1 << (count - 1).bit_length()


def padded(data: list[Any], multiple: int) -> list[Any]:
    """`data` and zero-weight copies of its first datum up to `padded_count` (fixed shapes)."""
    from tinker import types

    target = padded_count(len(data), multiple)
    if target == len(data):
        return data
    first = data[0]
    zero = {k: ([0.0] * len(_values(v)) if k != "target_tokens" else _values(v)) for k, v in first.loss_fn_inputs.items()}
    if "weights" not in zero:
        zero["weights"] = [0.0] * len(_values(first.loss_fn_inputs["target_tokens"]))
    filler = types.Datum(model_input=first.model_input, loss_fn_inputs=zero)
    return data + [filler] * (target - len(data))


def _values(tensor: Any) -> list:
    return list(tensor.data) if hasattr(tensor, "data") else list(tensor)


def response_logprobs(exp: Experience, target_logprobs: Any) -> list[float]:
    """The response tokens' part of a datum's per-target logprobs."""
    values = _values(target_logprobs)
    start = len(exp.prompt_token_ids) - 1
    return [float(x) for x in values[start : start + len(exp.response_token_ids)]]


def policy_metrics(plan_: LossPlan, batch: list[Experience], current: list[list[float]]) -> dict[str, float]:
    """What the torch trainer reports besides the loss, from the trainer's logprobs before the update:
    ppo_kl (the KL between sampler and trainer, k1, token mean), pg_clipfrac (ppo, cispo)."""
    kl_sum = tokens = clipped = 0.0
    low = high = None
    if plan_.config is not None:
        low, high = plan_.config["clip_low_threshold"], plan_.config["clip_high_threshold"]
    for exp, new in zip(batch, current, strict=True):
        for old_lp, new_lp, m in zip(exp.logprobs, new, response_mask(exp), strict=False):
            if not m:
                continue
            tokens += 1
            kl_sum += old_lp - new_lp
            if low is not None:
                ratio = math.exp(max(min(new_lp - old_lp, 20.0), -20.0))
                clipped += float(ratio < low or ratio > high)
    metrics = {"ppo_kl": kl_sum / tokens if tokens else 0.0}
    if low is not None:
        metrics["pg_clipfrac"] = clipped / tokens if tokens else 0.0
    return metrics


def custom_loss(algorithm: Any, batch: list[Experience], captured: dict[str, float],
                reference: list[list[float]] | None = None) -> Any:
    """A forward_backward_custom loss function: algorithms.compute_loss on the trainer's logprobs (and on
    `reference`, each response token's logprob under the reference, for a KL term)."""
    import algorithms

    def loss_fn(data: list[Any], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        rows = []
        for exp, lp in zip(batch, logprobs, strict=False):  # padding datums come last, unused
            start = len(exp.prompt_token_ids) - 1
            rows.append(lp[start : start + len(exp.response_token_ids)])
        width = max(len(r) for r in rows)
        current = torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in rows])
        def pad(values: list[float]) -> list[float]:
            return values + [0.0] * (width - len(values))
        mask = torch.tensor([pad(response_mask(e)) for e in batch], dtype=torch.float32)
        inputs = algorithms.LossInputs(
            logprobs=current,
            old_logprobs=torch.tensor([pad(list(e.logprobs)) for e in batch], dtype=torch.float32),
            advantages=torch.tensor([pad([float(e.advantage or 0.0)] * len(e.response_token_ids)) for e in batch]),
            response_mask=mask,
            global_num_tokens=int(mask.sum()),
            global_num_seqs=int((mask.sum(-1) > 0).sum()),
            ref_logprobs=None if reference is None else torch.tensor([pad(r) for r in reference], dtype=torch.float32),
        )
        loss, metrics = algorithms.compute_loss(algorithm, inputs)
        extra = [lp.sum() * 0.0 for lp in logprobs[len(batch):]]  # padding datums: in the graph, zero gradient
        captured.update(metrics)
        return loss + sum(extra), metrics

    return loss_fn
