"""Expert rows for the mix sample strategy (the mix family, docs/mix.md): the next rows of an auxiliary SFT
dataset, added to a train batch of sampled experiences. The rows are read round and round in order, the
position following from the step, so a resumed or retried step adds the same rows."""

from __future__ import annotations

from dataclasses import replace

from algorithms.registry import args_of
from buffer.experience import Experience
from checkpointing.models import resolve_model_path
from schemas import ExperimentConfig
from tasks.sft import dataset_key, supervised_examples


def expert_count(config: ExperimentConfig, sampled: int) -> int:
    """Expert rows to add to `sampled` experiences so that they are `expert_data_ratio` of the batch."""
    ratio = float(args_of(config.algorithm, "sample_strategy").get("expert_data_ratio", 0.5))
    return round(ratio / (1.0 - ratio) * sampled)


def expert_rows(config: ExperimentConfig, step: int, sampled: int) -> list[Experience]:
    """The expert rows of train step `step`, for a batch of `sampled` experiences (none without the mix strategy)."""
    if config.algorithm.sample_strategy != "mix":
        return []
    name = args_of(config.algorithm, "sample_strategy").get("sft_dataset_name", "sft_dataset")
    dataset = config.buffer.trainer_input.auxiliary_buffers[name]
    examples = supervised_examples(*dataset_key(config, str(resolve_model_path(config.model.model_path)), dataset))
    count = expert_count(config, sampled)
    first = (step - 1) * count
    return [replace(examples[(first + i) % len(examples)], eid=f"expert/{step}/{i}", expert=True,
                    model_version=step - 1, explore_step=step) for i in range(count)]
