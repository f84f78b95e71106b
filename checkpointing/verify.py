"""Check a converted model: transformers loads it and its logits match the unmerged model's.

Tolerance: max |logits(converted) - logits(unmerged)| <= TOLERANCE[dtype] * max |logits(unmerged)| + 1e-6,
both run in float32 on the same fixed input. `dtype` is what the converted weights are stored in:
- float32: 1e-4 — the only difference is the float rounding of merging W + (alpha/r)·BA.
- bfloat16 / float16: 3e-2 / 1e-2 — storing a merged LoRA rounds every weight to 8 (11) mantissa bits.
A wrong merge (transposed or misplaced shard, wrong LoRA scale, lost tied head, wrong config) moves
logits by O(1) of their scale, far above these bounds.
"""

from __future__ import annotations

from pathlib import Path

import torch

TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 1e-2}
SAMPLE_LENGTH = 32
ABSOLUTE_FLOOR = 1e-6  # logits of exactly 0 (degenerate models) still compare


class VerificationError(RuntimeError):
    """The converted model does not reproduce the checkpoint's logits."""


def sample_input(vocab_size: int) -> torch.Tensor:
    """A fixed batch of one sequence spread over the whole vocabulary (no tokenizer needed)."""
    return torch.linspace(0, vocab_size - 1, SAMPLE_LENGTH).long().unsqueeze(0)


@torch.no_grad()
def logits(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    model.eval()
    return model(input_ids=input_ids, use_cache=False).logits.float()


def tolerance(dtype: torch.dtype) -> float:
    return TOLERANCE.get(dtype, TOLERANCE[torch.bfloat16])


def verify(model_dir: Path, reference: torch.Tensor, input_ids: torch.Tensor, dtype: torch.dtype, where: str) -> float:
    """Load `model_dir` with transformers; return the max logit difference, raise if over tolerance."""
    from transformers import AutoModelForCausalLM  # lazily, as checkpointing.loaders.load_base_model says

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    diff = float((logits(model, input_ids) - reference).abs().max())
    bound = tolerance(dtype) * float(reference.abs().max()) + ABSOLUTE_FLOOR
    if not diff <= bound:  # also catches NaN
        raise VerificationError(
            f"{where}: converted model's logits differ from the checkpoint's by {diff:.3g} (allowed {bound:.3g}); "
            f"nothing was written to huggingface/"
        )
    return diff
