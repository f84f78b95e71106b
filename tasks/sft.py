"""SFT: supervised steps on (prompt, response) rows, the warm-up stage before RL."""

from __future__ import annotations

import functools
import time

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends.policy import policy_for
from buffer.experience import Experience
from buffer.taskset import TasksetError, load_taskset
from schemas import ExperimentConfig, StorageConfig
from tasks.usage import SideUsage
from workflows.render import renderer_for


def sft_dataset(config: ExperimentConfig) -> StorageConfig:
    trainer_input = config.buffer.trainer_input
    dataset = trainer_input.experience_buffer or trainer_input.sft_warmup_dataset
    if dataset is None:
        raise ValueError("buffer.trainer_input.experience_buffer: an SFT stage needs a dataset to train on")
    return dataset


@functools.lru_cache(maxsize=4)
def _examples(
    dataset_json: str, model_dir: str, max_prompt: int, max_response: int, model_template: str | None = None
) -> tuple[Experience, ...]:
    dataset = StorageConfig.model_validate_json(dataset_json)
    fmt = dataset.format
    renderer = renderer_for(model_dir, fmt.chat_template or model_template)  # the data's own, else the model's
    keys = [fmt.messages_key] if fmt.prompt_type == "messages" else [fmt.prompt_key, fmt.response_key]
    examples = []
    for item in load_taskset(dataset, required_keys=keys):  # type: ignore[arg-type]
        row = item.raw
        if fmt.prompt_type == "messages":
            messages = list(row[fmt.messages_key])
            if not messages or messages[-1].get("role") != "assistant":
                raise TasksetError(f"{item.task_id}: the last message of '{fmt.messages_key}' must be the assistant's")
        elif fmt.prompt_type == "plaintext":  # Trinity's name: a prompt and a response column, as one chat turn
            system = row.get(fmt.system_prompt_key) if fmt.system_prompt_key else fmt.system_prompt
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": str(row[fmt.prompt_key])},
                {"role": "assistant", "content": str(row[fmt.response_key])},
            ]
        else:  # validation refuses it (schemas/support.py)
            raise ValueError(f"format.prompt_type {fmt.prompt_type!r} is not read for SFT data; use messages or plaintext")
        prompt = renderer.text(messages[:-1], add_generation_prompt=True)
        full = renderer.text(messages, add_generation_prompt=False)
        prompt_ids = renderer.encode(prompt)
        response_ids = renderer.encode(full[len(prompt):])[:max_response]
        examples.append(
            Experience(
                eid=item.task_id, task_id=item.task_id, group_id=item.task_id,
                prompt_token_ids=prompt_ids[-max_prompt:], response_token_ids=response_ids,
                logprobs=[0.0] * len(response_ids), reward=0.0, advantage=0.0,
            )
        )
    if not examples:
        raise TasksetError(f"{dataset.path}: no rows")
    return tuple(examples)


@task(name="sft-step", cache_policy=NO_CACHE)
def sft_step(config: ExperimentConfig, step: int, model_dir: str) -> dict[str, float]:
    """One optimizer step on the next `train_batch_size` rows (the position follows from the step)."""
    started = time.perf_counter()
    examples = _examples(
        sft_dataset(config).model_dump_json(), model_dir,
        config.model.max_prompt_tokens or 1024, config.model.max_response_tokens or 1024, config.model.custom_chat_template,
    )
    size = config.buffer.train_batch_size
    batch = [examples[((step - 1) * size + i) % len(examples)] for i in range(size)]
    usage = SideUsage(config, "train")
    metrics = policy_for(config).trainer.train_step(batch)
    get_run_logger().info("sft step %d: loss %.4f", step, metrics.get("loss", float("nan")))
    return {**{f"train/{k}": v for k, v in metrics.items()}, **usage.metrics("train"), "time/train_s": time.perf_counter() - started}
