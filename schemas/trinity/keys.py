"""Trinity-RFT keys and what the import does with each beyond its name: renamed, without effect (left out with a
warning), refused with why. schemas/trinity/importer.py applies them; docs/trinity-parity.md lists them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _get(value: Any, key: str) -> Any:
    """`value[key]` of a mapping; a block given as a scalar (None, false) is that value."""
    return value.get(key) if isinstance(value, dict) else value


TRINITY_IDENTITY_DEFAULTS = {"project": "Trinity-RFT", "name": "rft"}
# Trinity keys renamed on the way in, per section model: {model class name: {trinity key: our key}}.
KEY_RENAMES: dict[str, dict[str, str]] = {
    "OptimizerConfig": {"warmup_style": "lr_scheduler_type"},
    "TasksetConfig": {"data_selector": "task_selector"},
    "StorageConfig": {"data_selector": "task_selector"},
}
# Trinity sections we have no settings for that are accepted when they set nothing.
EMPTY_SECTIONS = ("data_processor",)
# Values of Trinity we cannot honour; the key is reported and our default used instead.
UNSUPPORTED_VALUES: dict[str, set[str]] = {"monitor.monitor_type": {"swanlab"}}
# Trinity keys that have no effect in Trinity's current version, nor would here: left out with a warning
# (and a note in `derived`), not an error, per section model: {model class name: {trinity key: why}}.
_RETRIES = ("Trinity's retries of reading an SQL buffer (no longer a buffer setting there); buffers here are the "
            "experiment's own SQLite files")
_STORAGE_NO_EFFECT = {"max_retry_times": _RETRIES, "max_retry_interval": _RETRIES}
VERL_BATCHING = ("use_dynamic_bsz", "max_token_len_per_gpu", "ulysses_sequence_parallel_size")
NO_EFFECT: dict[str, dict[str, str]] = {
    "BufferConfig": _STORAGE_NO_EFFECT,
    "TasksetConfig": _STORAGE_NO_EFFECT,
    "StorageConfig": _STORAGE_NO_EFFECT,
    "GenerationConfig": {"n": "Trinity overwrites it with the task set's repeat_times (algorithm.repeat_times in "
                              "training, 1 in evaluation); to sample each eval problem k times, set that task set's "
                              "repeat_times"},
    "ExperimentConfig": {"log": "Trinity's logger settings (level, group_by_node); runs here log to their Prefect run"},
    "TrainerBase": {"enable_preview": "Trinity's table of sample rollouts in W&B, which changes no result (not built)"},
    "TinkerTrainerConfig": dict.fromkeys(VERL_BATCHING, "a veRL batching setting, which Trinity's Tinker trainer ignores "
                                                         "too"),
    # a file written for veRL read for the torch trainer (import_trinity)
    "TorchTrainerConfig": dict.fromkeys(VERL_BATCHING, "a veRL batching setting: the torch trainer's micro-batches "
                                        "(trainer.micro_batch_size) are normalised by the whole batch's counts, so how a "
                                        "batch is split changes no result"),
    "ExplorerConfig": {
        "runner_num": "deprecated in Trinity, which warns and runs explorer.runner_per_model runners per engine (default "
                      "8), as here",
        "concurrent_mode": "how a Trinity runner runs the repeats of a task (sequential, asynchronous, multi-threading): "
                           "throughput only; here an engine samples a task's repeat_times responses in one request",
        "max_repeat_times_per_runner": "how Trinity splits the repeats of a task among its runners: throughput only",
        "max_inflight_batches": "the explore steps in flight of Trinity's fully_async sync style only (refused here)",
    },
}
# Trinity's format has the columns of every kind of row; here a task set's and a dataset's differ (TaskFormat,
# DataFormat). A column setting of the other kind at Trinity's default changes nothing.
_FORMAT_DEFAULTS: dict[str, Any] = {"prompt_type": "messages", "messages_key": "message", "chosen_key": "chosen",
                                    "rejected_key": "rejected", "chat_template": None, "tools_key": "tools",
                                    "reply_prefix": None, "workflow_key": "", "reward_fn_key": ""}
# Trinity settings without effect in some of their values ({model class name: {trinity key: (no effect?, why)}}).
NO_EFFECT_WHEN: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    "RowFormat": {key: (lambda v, default=default: v == default, f"Trinity's default ({default!r}), which this kind of "
                      "row does not read") for key, default in _FORMAT_DEFAULTS.items()},
    "TrainerInput": {"sft_warmup_steps": (lambda v: not v, "Trinity's old warm-up, off (0 steps)"),
                     "sft_warmup_dataset": (lambda v: v is None, "Trinity's old warm-up's dataset, none")},
    "ExperiencePipelineConfig": {"inputs": (lambda v: not v, "Trinity's experimental input buffers, none"),
                                 "output": (lambda v: v is None, "Trinity's experimental output buffer, none")},
    "DataProcessorConfig": {"task_pipeline": (lambda v: v is None, "Trinity's Data-Juicer task pipeline, none")},
    "StorageConfig": {"replay_buffer": (lambda v: not _get(v, "enable"), "Trinity's replay buffer, off")},
    "ExplorerConfig": {
        "over_rollout": (lambda v: not _get(v, "ratio"), "Trinity's over-rollout with ratio 0: each step waits for all "
                         "its tasks, as here"),
        "dynamic_timeout": (lambda v: not _get(v, "enable"), "Trinity's dynamic timeout, off"),
    },
    # Trinity's default is false (its trainer recomputes the old policy's log-probs before the update)
    "AlgorithmConfig": {"bypass_old_logprobs": (lambda v: v is True, "the ratio's old log-probs are the rollout's, as "
                                                "here on every trainer")},
}
# Trinity's layout before 0.2 (still in some of its example folders), which Trinity itself no longer reads.
PRE_0_2_LAYOUT = ("Trinity's layout before 0.2 (data, buffer.train_dataset, explorer.engine_num, trainer.algorithm_type), "
                  "which Trinity itself no longer reads: write it in the current layout (buffer.explorer_input.taskset, "
                  "explorer.rollout_model, algorithm.algorithm_type)")
# Why a file written for veRL (Trinity's default trainer) is read for the torch trainer (import_trinity).
VERL_TO_TORCH = ("read for the torch trainer instead of veRL (Trinity's default), which here cannot run all of it: ")
# Why some Trinity keys we do not have are not imported (said with the key; they still need --allow-unsupported).
UNSUPPORTED_WHY = {
    "trainer.trainer_config_path": "a veRL YAML file of Trinity's repository; Trinity itself now refuses it "
                                   "(deprecated: give its settings as trainer.trainer_config)",
    "explorer.over_rollout": "Trinity's explorer ends a step once (1 − ratio) × batch_size of its tasks are done and "
                             "drops the rest; here a step waits for all its tasks (explorer.max_timeout bounds a slow "
                             "one): leave it out, or set ratio 0",
    "explorer.dynamic_timeout": "Trinity times each step out at ratio × the average time of a task; here "
                                "explorer.max_timeout is a fixed bound per task: leave it out and set that",
    "algorithm.bypass_old_logprobs": "false asks Trinity's trainer to recompute the old policy's log-probs before the "
                                     "update; no trainer here does: the ratio's old log-probs are always the rollout's "
                                     "(true)",
}
