"""SFT: supervised steps on (prompt, response) rows, the warm-up stage before RL; and what every stage that
learns from a dataset shares (tasks/dpo.py reads preference pairs with it): its dataset, a row's prompt as
a chat, a rendered turn, a step on the next rows."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends.policy import policy_for
from buffer.experience import Experience
from buffer.taskset import TasksetError, load_taskset
from schemas import ExperimentConfig, StorageConfig
from schemas.buffer import DataFormat
from tasks.usage import SideUsage
from workflows.render import ChatRenderer, renderer_for


def sft_dataset(config: ExperimentConfig) -> StorageConfig:
    trainer_input = config.buffer.trainer_input
    dataset = trainer_input.experience_buffer
    if dataset is None:
        raise ValueError("buffer.trainer_input.experience_buffer: a stage that learns from a dataset (sft, dpo) needs one")
    return dataset


def prompt_messages(row: dict[str, Any], fmt: DataFormat) -> list[dict[str, Any]]:
    """A plaintext row's prompt as a chat (Trinity's layout): the system prompt (the row's format.system_prompt_key
    column, else format.system_prompt), then the prompt_key column as the user's turn."""
    system = row.get(fmt.system_prompt_key) if fmt.system_prompt_key else fmt.system_prompt
    return ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": str(row[fmt.prompt_key])}]


def supervised_row(
    renderer: ChatRenderer, prompt: list[dict[str, Any]], reply: list[dict[str, Any]], max_prompt: int, max_response: int,
    eid: str, task_id: str, info: dict[str, Any] | None = None,
) -> Experience:
    """A chat and its reply turn(s) as a row to train on (no sampling logprobs, reward or advantage), through the chat
    template: the prompt with the generation prompt (its last `max_prompt` tokens), the reply what the template adds
    after it (its first `max_response` tokens)."""
    text = renderer.text(prompt, add_generation_prompt=True)
    full = renderer.text(prompt + reply, add_generation_prompt=False)
    prompt_ids, response_ids = renderer.encode(text)[-max_prompt:], renderer.encode(full[len(text):])[:max_response]
    return Experience(
        eid=eid, task_id=task_id, group_id=task_id, prompt_token_ids=prompt_ids, response_token_ids=response_ids,
        logprobs=[0.0] * len(response_ids), reward=0.0, advantage=0.0, info=info or {},
    )


def dataset_key(
    config: ExperimentConfig, model_dir: str, dataset: StorageConfig | None = None
) -> tuple[str, str, int, int, str | None]:
    """What the cached row loaders (SFT rows, DPO pairs) read: the dataset (by default the trainer's, else e.g. an
    auxiliary buffer), the model's tokenizer, the lengths, the model's template."""
    model = config.model
    return ((dataset or sft_dataset(config)).model_dump_json(), model_dir, model.max_prompt_tokens or 1024,
            model.max_response_tokens or 1024, model.custom_chat_template)


@functools.lru_cache(maxsize=4)
def supervised_examples(
    dataset_json: str, model_dir: str, max_prompt: int, max_response: int, model_template: str | None = None
) -> tuple[Experience, ...]:
    dataset = StorageConfig.model_validate_json(dataset_json)
    fmt = dataset.format
    renderer = renderer_for(model_dir, fmt.chat_template or model_template)  # the data's own, else the model's
    examples = []
    for item in load_taskset(dataset, required_keys=fmt.row_keys()):
        row = item.raw
        if fmt.prompt_type == "messages":
            messages = list(row[fmt.messages_key])
            if not messages or messages[-1].get("role") != "assistant":
                raise TasksetError(f"{item.task_id}: the last message of '{fmt.messages_key}' must be the assistant's")
        elif fmt.prompt_type == "plaintext":  # Trinity's name: a prompt and a response column, as one chat turn
            messages = prompt_messages(row, fmt) + [{"role": "assistant", "content": str(row[fmt.response_key])}]
        else:  # validation refuses it (a `SETTINGS` entry)
            raise ValueError(f"format.prompt_type {fmt.prompt_type!r} is not read for SFT data; use messages or plaintext")
        examples.append(supervised_row(renderer, messages[:-1], messages[-1:], max_prompt, max_response,
                                       eid=item.task_id, task_id=item.task_id))
    if not examples:
        raise TasksetError(f"{dataset.path}: no rows")
    return tuple(examples)


@task(name="sft-step", cache_policy=NO_CACHE)
def sft_step(config: ExperimentConfig, step: int, model_dir: str) -> dict[str, float]:
    """One optimizer step on the next `train_batch_size` rows (the position follows from the step)."""
    started = time.perf_counter()
    examples = supervised_examples(*dataset_key(config, model_dir))
    return train_on_rows(config, step, [(e,) for e in examples], started)


def train_on_rows(
    config: ExperimentConfig, step: int, rows: Sequence[tuple[Experience, ...]], started: float
) -> dict[str, float]:
    """One optimizer step on the next `train_batch_size` rows of a dataset, read round and round (the position
    follows from the step); a row is one experience (SFT) or several trained together (a DPO pair)."""
    size = config.buffer.train_batch_size
    batch = [e for i in range(size) for e in rows[((step - 1) * size + i) % len(rows)]]
    usage = SideUsage(config, "train")
    metrics = policy_for(config).trainer.train_step(batch)
    get_run_logger().info("%s step %d: loss %.4f", config.algorithm.algorithm_type, step, metrics.get("loss", float("nan")))
    return {**{f"train/{k}": v for k, v in metrics.items()}, **usage.metrics("train"), "time/train_s": time.perf_counter() - started}
