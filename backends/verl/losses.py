"""SFT on the veRL trainer: veRL's sft_loss on the batch layout the RL steps use.

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
