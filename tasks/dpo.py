"""DPO: steps on preference pairs — a prompt, the chosen and the rejected response — read from the stage's
dataset as Trinity-RFT reads them (its `dpo` formatter):

    plaintext   {prompt_key: "...", chosen_key: "...", rejected_key: "..."} (with the system prompt as for SFT)
    messages    {messages_key: [the prompt's messages], chosen_key: [assistant message(s)], rejected_key: [...]}

Each pair is rendered with the chat template like an SFT row, twice (prompt + chosen, prompt + rejected), and
trained as two rows, chosen first; the loss compares them against the reference (algorithms/policy_loss/dpo.py).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends.policy import policy_for
from buffer.experience import Experience
from buffer.taskset import TasksetError, load_taskset
from checkpointing.models import resolve_model_path
from schemas import ExperimentConfig, StorageConfig
from schemas.buffer import DataFormat
from tasks.sft import dataset_key, prompt_messages, supervised_row, train_on_rows
from workflows.render import renderer_for

Messages = list[dict[str, Any]]


def pair_messages(row: dict[str, Any], fmt: DataFormat, where: str) -> tuple[Messages, Messages, Messages]:
    """(prompt, chosen, rejected) messages of one preference row; `where` names the row in errors."""
    if fmt.prompt_type == "plaintext":
        prompt = prompt_messages(row, fmt)
    elif fmt.prompt_type == "messages":
        prompt = list(row[fmt.messages_key] or [])
    else:  # validation refuses it (a `SETTINGS` entry)
        raise ValueError(f"format.prompt_type {fmt.prompt_type!r} is not read for DPO data; use plaintext or messages")
    if not prompt:
        raise TasksetError(f"{where}: the prompt ('{fmt.messages_key}') has no message")
    return prompt, _reply(row, fmt.chosen_key, where), _reply(row, fmt.rejected_key, where)


def _reply(row: dict[str, Any], key: str, where: str) -> Messages:
    """A response column: its text (one assistant turn), or its assistant message(s)."""
    value = row[key]
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    messages = list(value or [])
    if not messages or not all(isinstance(m, dict) for m in messages) or messages[-1].get("role") != "assistant":
        raise TasksetError(f"{where}: '{key}' must be a text or messages ending with the assistant's")
    return messages


@functools.lru_cache(maxsize=4)
def preference_pairs(
    dataset_json: str, model_dir: str, max_prompt: int, max_response: int, model_template: str | None = None
) -> tuple[tuple[Experience, Experience], ...]:
    """Every row of the dataset as (chosen, rejected) experiences through the chat template (the data's own,
    else the model's), prompts cut to their last `max_prompt` tokens, responses to their first `max_response`."""
    dataset = StorageConfig.model_validate_json(dataset_json)
    fmt = dataset.format
    renderer = renderer_for(model_dir, fmt.chat_template or model_template)
    pairs = []
    for item in load_taskset(dataset, required_keys=fmt.row_keys(pairs=True)):
        prompt, chosen, rejected = pair_messages(item.raw, fmt, item.task_id)
        chosen_row, rejected_row = (
            supervised_row(renderer, prompt, reply, max_prompt, max_response,
                           eid=f"{item.task_id}/{side}", task_id=item.task_id, info={"side": side})
            for side, reply in (("chosen", chosen), ("rejected", rejected)))
        pairs.append((chosen_row, rejected_row))
    if not pairs:
        raise TasksetError(f"{dataset.path}: no rows")
    return tuple(pairs)


@task(name="evaluate-pairs", cache_policy=NO_CACHE)
def evaluate_pairs(config: ExperimentConfig) -> dict[str, Any]:
    """The held-out pairs (buffer.trainer_input.eval_pairs) under the trainer's current weights, as an eval
    result {"name", "metrics", "rows"}: preference_accuracy, the share of pairs whose chosen response has the
    higher log-probability (summed over its tokens), and preference_margin, the mean of log π(chosen) −
    log π(rejected). Unlike the loss's reward accuracy it needs no reference model: it is the model's own
    preference, before training as after."""
    dataset = config.buffer.trainer_input.eval_pairs
    if dataset is None:
        raise ValueError("buffer.trainer_input.eval_pairs is not set: there are no held-out pairs to score")
    model_dir = str(resolve_model_path(config.model.model_path))  # the tokenizer (a later stage: the one before's)
    pairs = preference_pairs(*dataset_key(config, model_dir, dataset))
    logprobs = policy_for(config).trainer.logprobs([row for pair in pairs for row in pair])
    margins = [sum(chosen) - sum(rejected) for chosen, rejected in zip(logprobs[::2], logprobs[1::2], strict=True)]
    metrics = {"preference_accuracy": sum(m > 0 for m in margins) / len(margins),
               "preference_margin": sum(margins) / len(margins), "pairs": float(len(margins))}
    rows = [{"task_id": chosen.task_id, "margin": round(m, 4), "prefers_chosen": m > 0}
            for (chosen, _), m in zip(pairs, margins, strict=True)]
    get_run_logger().info("eval %s: preference accuracy %.3f, margin %.3f on %d held-out pairs", dataset.name,
                          metrics["preference_accuracy"], metrics["preference_margin"], len(margins))
    return {"name": dataset.name, "metrics": metrics, "rows": rows}


@task(name="dpo-step", cache_policy=NO_CACHE)
def dpo_step(config: ExperimentConfig, step: int, model_dir: str) -> dict[str, float]:
    """One optimizer step on the next `train_batch_size` pairs (2 × train_batch_size rows)."""
    started = time.perf_counter()
    pairs = preference_pairs(*dataset_key(config, model_dir))
    return train_on_rows(config, step, pairs, started)
