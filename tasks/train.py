"""Train: one optimizer step on the oldest untrained experiences of the buffer (with the mix strategy, and
expert rows of an SFT dataset)."""

from __future__ import annotations

import time

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from algorithms.registry import args_of
from backends.policy import policy_for
from buffer.experience_store import ExperienceStore
from checkpointing.layout import experiment_dir
from schemas import ExperimentConfig
from tasks.expert import expert_rows
from tasks.usage import SideUsage


def max_staleness(config: ExperimentConfig) -> int | None:
    """Versions an experience may lag the trainer by (algorithm.sample_strategy_args.max_staleness)."""
    return args_of(config.algorithm, "sample_strategy").get("max_staleness")


def take_order(config: ExperimentConfig) -> str:
    """The buffer order of algorithm.sample_strategy (ExperienceStore.ORDERS): default, warmup and
    staleness_control (Trinity's name of default with max_staleness) and mix take the oldest first; priority by
    its priority_fn."""
    strategy = config.algorithm.sample_strategy
    if strategy in ("default", "warmup", "staleness_control", "mix"):  # mix: plus expert rows (tasks/expert.py)
        return "oldest"
    if strategy == "priority":
        return args_of(config.algorithm, "sample_strategy").get("priority_fn", "newest")
    raise ValueError(f"algorithm.sample_strategy {strategy!r} has no buffer order (validation refuses it)")


def empty_step(skipped: int, started: float) -> dict[str, float]:
    """The metrics of a step that trains nothing (the weights stay)."""
    return {"train/empty_step": 1.0, "train/skipped_stale": float(skipped), "time/train_s": time.perf_counter() - started}


@task(name="train-step", cache_policy=NO_CACHE)
def train_step(config: ExperimentConfig, step: int) -> dict[str, float]:
    """Experiences stay untrained in the buffer until the step that used them has finished; those
    staler than max_staleness are skipped (and counted), never trained; the others are taken in the
    order of algorithm.sample_strategy."""
    started = time.perf_counter()
    version = step - 1  # the weights this step starts from
    store = ExperienceStore.for_experiment(experiment_dir(config))
    try:
        limit = max_staleness(config)
        skipped = store.skip_stale(version - limit, step) if limit is not None else 0
        batch = store.take(config.buffer.train_batch_size, order=take_order(config))
        if not batch and store.all_dropped(step):  # e.g. a reward_filter that no sample of the step passed
            get_run_logger().warning(
                "train step %d: explore step %d kept none of its experiences (data_processor.experience_pipeline "
                "or algorithm.filter_groups dropped them all): this step trains nothing, the weights stay", step, step)
            return empty_step(skipped, started)
        if not batch:
            raise RuntimeError(
                f"train step {step}: the experience buffer has nothing to train on"
                + (f" ({skipped} experiences were staler than max_staleness {limit})" if skipped else "")
            )
        experts = expert_rows(config, step, len(batch))  # the mix strategy's SFT rows, beside the sampled ones
        if not any(any(e.response_mask) for e in batch + experts):
            # every loss is a mean over the masked tokens: with none it is 0/0 (veRL's agg_loss too), so no trainer runs
            store.mark_trained([e.eid for e in batch], step)
            get_run_logger().warning(
                "train step %d: none of its %d experiences has a response token to train on (every response masked, "
                "e.g. all cut at model.max_response_tokens under mask_response_truncated): this step trains nothing, "
                "the weights stay", step, len(batch))
            return empty_step(skipped, started)
        usage = SideUsage(config, "train")
        metrics = policy_for(config).trainer.train_step(batch + experts)
        used = usage.metrics("train")  # the trainer's CPU seconds and GPUs
        store.mark_trained([e.eid for e in batch], step)
    finally:
        store.close()
    staleness = [version - e.model_version for e in batch]
    get_run_logger().info("train step %d: %d experiences, loss %.4f, staleness %d..%d", step, len(batch),
                          metrics.get("loss", float("nan")), min(staleness), max(staleness))
    return {
        **{f"train/{k}": v for k, v in metrics.items()},
        "train/staleness_min": float(min(staleness)),
        "train/staleness_mean": sum(staleness) / len(staleness),
        "train/staleness_max": float(max(staleness)),
        "train/skipped_stale": float(skipped),
        **({"train/expert_rows": float(len(experts))} if experts else {}),
        **used,
        "time/train_s": time.perf_counter() - started,
    }
