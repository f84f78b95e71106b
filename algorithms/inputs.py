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
    # The mix family (algorithms/policy_loss/mix.py): which rows are expert (SFT) rows [B] bool, and the
    # whole batch's counts of the expert rows' tokens / sequences (each part is normalised over its own rows).
    expert_mask: torch.Tensor | None = None
    global_expert_tokens: int | None = None
    global_expert_seqs: int | None = None
    step: int = 0  # the train step being taken (1-based): a loss with a schedule (mix_chord's μ) reads it
    dp_size: int = 1  # data-parallel ranks the whole-batch counts span (veRL's FSDP workers; one process: 1)
    token_mask: torch.Tensor | None = None  # [B, T] a loss's mask chosen over the whole batch (m2po; the trainer's)
    # Distillation from the teacher's top-k (algorithms/policy_loss/topk_distill.py), both [B, T, k]: the teacher's
    # log-probs of its k likeliest tokens at each position, and the current policy's log-probs of the same tokens.
    teacher_topk_logprobs: torch.Tensor | None = None
    student_topk_logprobs: torch.Tensor | None = None

    def validate(self) -> None:
        shape = self.logprobs.shape
        if self.logprobs.dim() != 2:
            raise ValueError(f"LossInputs.logprobs must be [B, T], got shape {tuple(shape)}")
        for name in ("old_logprobs", "advantages", "response_mask", "ref_logprobs", "entropy", "token_mask"):
            value = getattr(self, name)
            if value is not None and value.shape != shape:
                raise ValueError(f"LossInputs.{name} has shape {tuple(value.shape)}, expected {tuple(shape)}")
        for name in ("teacher_topk_logprobs", "student_topk_logprobs"):
            value = getattr(self, name)
            if value is not None and (value.dim() != 3 or tuple(value.shape[:2]) != tuple(shape)):
                raise ValueError(f"LossInputs.{name} has shape {tuple(value.shape)}, expected {tuple(shape)} + (k,)")
        if self.expert_mask is not None and tuple(self.expert_mask.shape) != (shape[0],):
            raise ValueError(f"LossInputs.expert_mask has shape {tuple(self.expert_mask.shape)}, expected ({shape[0]},)")

    def rows(self, expert: bool) -> LossInputs:
        """The expert rows (or the others) as inputs of their own, normalised by that part's whole-batch
        counts: summed over micro-batches, a loss of them is that part's loss over the whole batch."""
        if self.expert_mask is None:
            raise ValueError("LossInputs.expert_mask is None: the mix losses need the mix sample strategy's expert rows")
        keep = self.expert_mask if expert else ~self.expert_mask
        tokens, seqs = self.global_expert_tokens, self.global_expert_seqs
        if not expert and self.global_num_tokens is not None:
            tokens = self.global_num_tokens - (tokens or 0)
            seqs = (self.global_num_seqs or 0) - (seqs or 0)
        pick = lambda t: None if t is None else t[keep]  # noqa: E731
        return LossInputs(
            logprobs=self.logprobs[keep], old_logprobs=self.old_logprobs[keep], advantages=self.advantages[keep],
            response_mask=self.response_mask[keep], ref_logprobs=pick(self.ref_logprobs), entropy=pick(self.entropy),
            token_mask=pick(self.token_mask),
            global_num_tokens=tokens if self.global_num_tokens is not None else None,
            global_num_seqs=seqs if self.global_num_tokens is not None else None, step=self.step, dp_size=self.dp_size,
        )

    def batch_info(self) -> dict[str, int | None]:
        """Keyword arguments for veRL's ``agg_loss``."""
        return {"dp_size": self.dp_size, "batch_num_tokens": self.global_num_tokens, "global_batch_size": self.global_num_seqs}
