"""Experiences → the TensorDict batches veRL's engine workers take, and their outputs and metrics back.

Layout: our `backends.batch.collate` (prompts left-padded, responses right-padded) is veRL's padded
layout; `left_right_2_no_padding` turns it into the jagged ("no padding") tensors the engine always
runs on. Rollout logprobs are the old log-probs, the outcome advantage is broadcast over the
response, the reference log-probs are added when the KL term is on.

veRL splits a batch evenly over data-parallel ranks and, without dynamic batch sizes, into
micro-batches of a fixed size, so a batch is padded to a multiple of that with copies of a real row
whose response mask and advantage are zero: they add nothing to any sum, and the token count veRL
normalises by (the sum of the loss masks) ignores them. The sequence count of the seq-mean modes is
passed explicitly (`global_batch_size`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from backends.batch import collate
from buffer.experience import Experience

# veRL's metric name -> ours (the names the torch trainer logs, under train/ in MLflow)
METRIC_NAMES = {
    "loss": "loss",
    "actor/pg_loss": "pg_loss",
    "actor/pg_clipfrac": "pg_clipfrac",
    "actor/pg_clipfrac_lower": "pg_clipfrac_lower",
    "actor/ppo_kl": "ppo_kl",
    "actor/entropy_loss": "entropy",
    "kl_loss": "kl_loss",
    "grad_norm": "grad_norm",
    "lr_used": "lr",  # the lr this step used (veRL's own "lr" is read after its scheduler step)
}
OURS = "rft/"  # our whole loss's other metrics (backends/verl/losses.py), under their own names


def padded(experiences: list[Experience], multiple: int) -> list[Experience]:
    """`experiences` and zero-weight copies of the first one, to a multiple of `multiple` rows."""
    missing = -len(experiences) % max(multiple, 1)
    if not missing:
        return list(experiences)
    first = experiences[0]
    filler = replace(first, eid=f"{first.eid}#pad", advantage=0.0, response_mask=[0] * len(first.response_token_ids))
    return [*experiences, *[replace(filler, eid=f"{filler.eid}{i}") for i in range(missing)]]


def with_advantage(experiences: list[Experience]) -> list[Experience]:
    """collate() insists on an advantage; scoring log-probs needs none."""
    return [e if e.advantage is not None else replace(e, advantage=0.0) for e in experiences]


def to_tensordict(
    experiences: list[Experience], pad_token_id: int, temperature: float, ref_log_prob: torch.Tensor | None = None,
    **response_tensors: torch.Tensor,
):  # noqa: ANN201  (a tensordict.TensorDict)
    """The batch veRL's workers take (jagged input_ids/position_ids/loss_mask, dense response tensors).
    `response_tensors`: more [B, R] tensors by name, or replacing one (a critic's per-token `advantages`, its old
    `values` and `returns`)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    b = collate(experiences, pad_token_id)
    tensors = {
        "prompts": b.input_ids[:, : b.prompt_width],
        "responses": b.response_ids,
        "input_ids": b.input_ids,
        "attention_mask": b.attention_mask,
        "position_ids": b.position_ids,
        "response_mask": b.response_mask,
        "old_log_probs": b.old_logprobs,
        "advantages": b.advantages,
    }
    if ref_log_prob is not None:
        tensors["ref_log_prob"] = ref_log_prob
    tensors.update(response_tensors)
    return left_right_2_no_padding(tu.get_tensordict(tensors, non_tensor_dict={"temperature": float(temperature)}))


def response_logprobs(output, batch, key: str = "log_probs") -> torch.Tensor:  # noqa: ANN001
    """[B, R] log-probs (or the critic's `values`) of the response tokens from a worker's (jagged, whole-sequence)
    output: for token j, read where the model predicts it."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    return no_padding_2_padding(tu.get(output, key), batch).float()


def sequences_trained(experiences: list[Experience]) -> int:
    """The sequence count seq-mean losses divide by: rows with any token trained on."""
    return sum(1 for e in experiences if any(e.response_mask))


def our_metrics(verl_metrics: dict, known: dict[str, str] = METRIC_NAMES) -> dict[str, float]:
    """veRL's per-mini-batch metric lists (one mini-batch per step) under our names (`known`: veRL's name -> ours;
    our whole loss's own metrics keep theirs)."""
    names = {**known, **{key: key.removeprefix(OURS) for key in verl_metrics if key.startswith(OURS)}}
    out = {}
    for theirs, ours in names.items():
        if theirs in verl_metrics:
            value = verl_metrics[theirs]
            out[ours] = float(np.mean(value)) if isinstance(value, (list, tuple)) else float(value)
    return out
