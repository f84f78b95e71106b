"""Experiences → padded tensors, in the layout veRL uses too.

Prompts are left-padded and responses right-padded, so every response starts at the same column:
the logits predicting response token j sit at column `prompt_width - 1 + j` for every row, and a
forward pass only needs the last `response_width + 1` logits.

When every row of a micro-batch has the same prompt (the samples of one GRPO group), `shared_prompt`
holds it once, so the trainer can run the prompt a single time and let all responses attend to it.
With `share_opening`, rows whose prompts differ but open with the same tokens (one system prompt and
chat template) share that opening the same way: it fills the first columns of every row, and each
prompt's own tail is left-padded after it, so the responses still start at one column.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import groupby

import torch

from buffer.experience import Experience


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, P + R]
    attention_mask: torch.Tensor  # [B, P + R]
    position_ids: torch.Tensor  # [B, P + R]
    response_ids: torch.Tensor  # [B, R]
    response_mask: torch.Tensor  # [B, R] float, 1 where trained on
    old_logprobs: torch.Tensor  # [B, R]
    advantages: torch.Tensor  # [B, R]: the outcome advantage broadcast over the response, or per token
    prompt_width: int
    response_width: int
    shared_prompt: torch.Tensor | None = None  # [S ≤ P]: the prompt (or its opening) every row starts with
    rewards: torch.Tensor | None = None  # [B]: each experience's reward (a critic's GAE places it per token)
    expert_mask: torch.Tensor | None = None  # [B] bool: the mix strategy's expert rows (tasks/expert.py)
    token_penalty: torch.Tensor | None = None  # [B, R]: the reward's KL penalty per token, for GAE (set by the trainer)
    # [B, R, k]: the teacher's k likeliest tokens at each response position and their log-probs (topk_distill)
    teacher_topk_ids: torch.Tensor | None = None
    teacher_topk_logprobs: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())


# Below this many common tokens, the extra forward call of a shared opening costs more than it saves.
MIN_SHARED_OPENING = 16


def shared_opening(experiences: list[Experience], share_opening: bool = False) -> int:
    """Tokens every row's prompt starts with that the batch lays out once: the whole prompt when the rows
    share it; with `share_opening`, their common opening when it is at least MIN_SHARED_OPENING long; else 0."""
    if _one_prompt(experiences):
        return len(experiences[0].prompt_token_ids)
    if not share_opening:
        return 0
    common = len(os.path.commonprefix([e.prompt_token_ids for e in experiences]))  # element-wise, on token lists
    return common if common >= MIN_SHARED_OPENING else 0


def collate(experiences: list[Experience], pad_token_id: int, share_opening: bool = False) -> TrainBatch:
    """Pad a micro-batch; experiences must carry their advantage. `share_opening`: module docstring."""
    missing = [e.eid for e in experiences if e.advantage is None]
    if missing:
        raise ValueError(f"experiences without an advantage cannot be trained on: {missing[:5]}")
    opening = shared_opening(experiences, share_opening)
    prompt_width = opening + max(len(e.prompt_token_ids) - opening for e in experiences)
    response_width = max(max(len(e.response_token_ids) for e in experiences), 1)
    rows = len(experiences)
    width = prompt_width + response_width

    input_ids = torch.full((rows, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((rows, width), dtype=torch.long)
    response_mask = torch.zeros((rows, response_width), dtype=torch.float32)
    old_logprobs = torch.zeros((rows, response_width), dtype=torch.float32)
    advantages = torch.zeros((rows, response_width), dtype=torch.float32)
    for row, exp in enumerate(experiences):
        prompt, response = exp.prompt_token_ids, exp.response_token_ids
        input_ids[row, :opening] = torch.tensor(prompt[:opening], dtype=torch.long)
        attention_mask[row, :opening] = 1
        start = prompt_width - (len(prompt) - opening)  # the prompt's own tail, left-padded after the opening
        input_ids[row, start:prompt_width] = torch.tensor(prompt[opening:], dtype=torch.long)
        input_ids[row, prompt_width : prompt_width + len(response)] = torch.tensor(response, dtype=torch.long)
        attention_mask[row, start : prompt_width + len(response)] = 1
        response_mask[row, : len(response)] = torch.tensor(exp.response_mask, dtype=torch.float32)
        old_logprobs[row, : len(response)] = torch.tensor(exp.logprobs, dtype=torch.float32)
        if exp.token_advantages is not None:  # a teacher's per-token advantages (on-policy distillation)
            advantages[row, : len(response)] = torch.tensor(exp.token_advantages, dtype=torch.float32)
        else:
            advantages[row, : len(response)] = float(exp.advantage)  # type: ignore[arg-type]
        if exp.token_rewards is not None:  # process rewards on top of the group's outcome advantage
            advantages[row, : len(response)] += torch.tensor(exp.token_rewards, dtype=torch.float32)
    position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)
    topk_ids, topk_logprobs = _teacher_topk(experiences, response_width)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_ids=input_ids[:, prompt_width:],
        response_mask=response_mask,
        old_logprobs=old_logprobs,
        advantages=advantages,
        prompt_width=prompt_width,
        response_width=response_width,
        shared_prompt=input_ids[0, :opening] if opening else None,
        rewards=torch.tensor([float(e.reward) for e in experiences], dtype=torch.float32),
        expert_mask=torch.tensor([e.expert for e in experiences], dtype=torch.bool),
        teacher_topk_ids=topk_ids,
        teacher_topk_logprobs=topk_logprobs,
    )


def _teacher_topk(experiences: list[Experience], width: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """[B, width, k] ids and log-probs of the teacher's top k (None when no row has them); padding is id 0 at
    log-prob 0, under a zero response mask."""
    k = next((len(e.teacher_topk_ids[0]) for e in experiences if e.teacher_topk_ids), 0)
    if not k:
        return None, None
    ids = torch.zeros((len(experiences), width, k), dtype=torch.long)
    logprobs = torch.zeros((len(experiences), width, k), dtype=torch.float32)
    for row, exp in enumerate(experiences):
        if exp.teacher_topk_ids is None or exp.teacher_topk_logprobs is None:
            raise ValueError(f"experience {exp.eid} has no teacher top-k log-probs, beside rows that have them")
        n = len(exp.teacher_topk_ids)
        ids[row, :n] = torch.tensor(exp.teacher_topk_ids, dtype=torch.long).view(n, k)
        logprobs[row, :n] = torch.tensor(exp.teacher_topk_logprobs, dtype=torch.float32).view(n, k)
    return ids, logprobs


def stack_padded(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Micro-batches' [b, r] tensors (r ≤ width) stacked into one [B, width] tensor, right-padded with zeros."""
    return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in rows])


def _one_prompt(experiences: list[Experience]) -> bool:
    return all(e.prompt_token_ids == experiences[0].prompt_token_ids for e in experiences)


def micro_batches(experiences: list[Experience], size: int, pairs: bool = False,
                  by_prompt: bool = False) -> list[list[Experience]]:
    """Split a batch into micro-batches, the samples of one prompt together and by response length,
    so that micro-batches share their prompt where they can and little compute goes to padding.

    `by_prompt` (the trainer's share_prompt): a prompt with several samples gets micro-batches of its own,
    which run that prompt once (a GRPO group of 8 in a micro-batch of 16 would otherwise run 16 prompts);
    rows whose prompt is theirs alone are packed together as before.

    `pairs`: the batch is (chosen, rejected) pairs of rows, which a preference loss compares: each pair stays
    together and in order, `size // 2` pairs (at least one) a micro-batch; a pair shares its prompt."""
    if pairs:
        if len(experiences) % 2:
            raise ValueError(f"a batch of preference pairs has an even number of rows; got {len(experiences)}")
        per = max(size // 2, 1) * 2
        return [experiences[i : i + per] for i in range(0, len(experiences), per)]
    size = max(size, 1)

    def key(e: Experience) -> tuple[int, list[int], int]:
        return len(e.prompt_token_ids), e.prompt_token_ids, len(e.response_token_ids)

    ordered = sorted(experiences, key=key)
    if not by_prompt:
        return [ordered[i : i + size] for i in range(0, len(ordered), size)]
    groups = [list(rows) for _, rows in groupby(ordered, key=lambda e: e.prompt_token_ids)]
    alone = [g[0] for g in groups if len(g) == 1]
    shared = [g[i : i + size] for g in groups if len(g) > 1 for i in range(0, len(g), size)]
    return shared + [alone[i : i + size] for i in range(0, len(alone), size)]
