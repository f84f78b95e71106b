"""The tensors a trainer hands to :func:`algorithms.compute_loss`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class LossInputs:
    """Per-token tensors of one (micro-)batch, all shaped [B, T] over the response tokens.

    ``global_num_tokens`` / ``global_num_seqs``: when a trainer splits a batch into micro-batches and
    accumulates gradients, it sets these to the whole batch's count of response tokens / non-empty
    sequences and *sums* the micro-batch losses; the result then equals the loss over the whole batch
    (this is how veRL normalises across micro-batches). Left as None, each call is normalised on its own.
    """

    logprobs: torch.Tensor  # current policy, requires grad
    old_logprobs: torch.Tensor  # behaviour (rollout) policy
    advantages: torch.Tensor
    response_mask: torch.Tensor  # 1.0 where the token is trained on
    ref_logprobs: torch.Tensor | None = None  # reference model, when a KL term is on
    entropy: torch.Tensor | None = None  # per-token entropy, when an entropy term is on
    global_num_tokens: int | None = None
    global_num_seqs: int | None = None

    def validate(self) -> None:
        shape = self.logprobs.shape
        if self.logprobs.dim() != 2:
            raise ValueError(f"LossInputs.logprobs must be [B, T], got shape {tuple(shape)}")
        for name in ("old_logprobs", "advantages", "response_mask", "ref_logprobs", "entropy"):
            value = getattr(self, name)
            if value is not None and value.shape != shape:
                raise ValueError(f"LossInputs.{name} has shape {tuple(value.shape)}, expected {tuple(shape)}")

    def batch_info(self) -> dict[str, int | None]:
        """Keyword arguments for veRL's ``agg_loss`` (single process: dp_size 1)."""
        return {"dp_size": 1, "batch_num_tokens": self.global_num_tokens, "global_batch_size": self.global_num_seqs}
