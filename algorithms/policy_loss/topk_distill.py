"""``topk_distill``: on-policy distillation from the teacher's whole next-token distribution, not one sample of it.

At each token of the student's own sample the teacher's top-k log-probs (scored on the explorer, tasks/rollouts.py
`score_with_teacher`) give a distribution q over k tokens, renormalised; the loss is the forward KL from it to the
student, over those k tokens:

    loss_t = Σ_j q_j · (log q_j − log p(j))

with p the student's current probability (over the whole vocabulary, so mass outside the teacher's top k is
pushed in). The sampled-token advantage of ``on_policy_distill`` only lowers a wrong token the student sampled;
this loss also raises the right one the teacher would pick (docs/distill.md). It is this project's loss (after
GKD's on-policy forward KL, Agarwal et al. 2024), not one of Trinity-RFT's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.aggregation import aggregate
from algorithms.policy_loss.base import TeacherTopkArgs, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class TopkDistillArgs(TeacherTopkArgs):
    """Forward KL from the teacher's top-k distribution at each sampled position to the student's."""

    topk: int = Field(20, ge=1, le=20, description="Teacher log-probs per position (vLLM returns at most 20).")


@register_policy_loss_fn("topk_distill", TopkDistillArgs, needs={"teacher_topk"})
def topk_distill(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    import torch

    if inputs.teacher_topk_logprobs is None or inputs.student_topk_logprobs is None:
        raise ValueError("policy_loss_fn 'topk_distill' needs the teacher's top-k log-probs of each response position "
                         "(LossInputs.teacher_topk_logprobs): the explorer scores them with a teacher")
    teacher = torch.log_softmax(inputs.teacher_topk_logprobs, dim=-1)  # renormalised over the k tokens
    q = teacher.exp()
    kl = (q * (teacher - inputs.student_topk_logprobs)).sum(-1)  # [B, T]
    loss = aggregate(kl, inputs, args["loss_agg_mode"], args.get("loss_scale_factor"))
    mask = inputs.response_mask
    tokens = mask.sum().clamp(min=1.0)
    with torch.no_grad():
        student_mass = (inputs.student_topk_logprobs.exp().sum(-1) * mask).sum() / tokens
        agree = ((inputs.student_topk_logprobs.argmax(-1) == 0).float() * mask).sum() / tokens
    return loss, {"pg_loss": loss.item(), "topk_kl": float((kl.detach() * mask).sum() / tokens),
                  "student_topk_mass": float(student_mass), "teacher_top1_agreement": float(agree)}
