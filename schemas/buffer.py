"""`buffer`: batch sizes and the length of the run, what the explorer reads (schemas/taskset.py) and what the trainer
reads: a dataset (SFT, DPO), or in an RL mode the experiment's own buffer, beside its auxiliary datasets and held-out
pairs."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from algorithms import is_preference_loss
from schemas.base import Entry, Section, honoured, refused, validated, warned
from schemas.dataset import NOT_TASKS, DatasetFields, RowFormat
from schemas.stage_kind import stage_kind
from schemas.taskset import ExplorerInput


class DataFormat(RowFormat):
    """How the rows of a dataset the trainer reads (SFT, DPO) map to prompts and responses."""

    NOT_HERE: ClassVar[dict[str, str]] = {
        **RowFormat.NOT_HERE,
        "base_model_prompt": "SFT and DPO rows are rendered with the chat template (format.chat_template); a "
                             "plain-text prompt is math_workflow's, for rollouts",
        "workflow_key": NOT_TASKS, "reward_fn_key": NOT_TASKS}

    prompt_type: Literal["messages", "chatpair", "plaintext"] = Field(
        "messages", description="Row layout for SFT/DPO data: messages list, chat pair or plain text."
    )
    messages_key: str = Field("message", description="Column holding a message list (prompt_type messages).")
    chosen_key: str = Field(
        "chosen", description="Column of the preferred response (DPO): its text (plaintext) or its assistant messages "
        "(messages)."
    )
    rejected_key: str = Field("rejected", description="Column of the rejected response (DPO), as chosen_key.")
    chat_template: str | None = Field(None, description="Chat template for SFT/DPO rows; None: model's.")

    def row_keys(self, pairs: bool = False) -> list[str]:
        """The columns every row of a dataset the trainer reads must have: an SFT row (`pairs` False) or a
        preference pair (DPO: the prompt, then the chosen and the rejected response, as Trinity reads them)."""
        if pairs:
            prompt = self.messages_key if self.prompt_type == "messages" else self.prompt_key
            return [prompt, self.chosen_key, self.rejected_key]
        return [self.messages_key] if self.prompt_type == "messages" else [self.prompt_key, self.response_key]


# Trinity's storage has a task set's fields too; a dataset the trainer reads is never rolled out here.
_IN_FILE_ORDER = "SFT rows are read in file order, batch after batch"


class StorageConfig(DatasetFields):
    """Where experiences (or SFT/DPO rows) are kept for the trainer: a dataset it reads, or in an RL mode the
    experiment's own buffer."""

    NOT_HERE: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("rollout_args", "workflow_args", "reward_fn_args", "repeat_times", "default_workflow_type",
                         "default_reward_fn_type"), NOT_TASKS),
        "task_selector": _IN_FILE_ORDER, "data_selector": _IN_FILE_ORDER}

    format: DataFormat = Field(default_factory=DataFormat, description="Column mapping.")
    capacity: int = Field(10000, ge=1, description="Queue capacity in experiences (queue storage).")
    max_read_timeout: float = Field(1800, gt=0, description="Seconds a reader waits for data before failing.")


def _rl_mode(value: Any, config: Any) -> bool:
    """The trainer reads experiences (mode both or colocate, or train with an RL algorithm), not a dataset."""
    return stage_kind(config).rl


def _not_preference(value: Any, config: Any) -> bool:
    return not is_preference_loss(config.algorithm.policy_loss_fn)


ONLY_PREFERENCE = "only a preference loss (algorithm_type dpo, policy_loss_fn dpo) reads it"
RL_BUFFER = ("in an RL mode experiences are kept in the experiment's own SQLite buffer "
             "(buffer/experiences.db in the experiment folder)")
NOT_PAIR_RESPONSE = "not read: a preference pair's responses are the columns format.chosen_key and format.rejected_key"


def _trainer_input_settings() -> dict[str, Entry]:
    """What the trainer reads, keyed below buffer.trainer_input: its one StorageConfig class has three roles, a dataset
    or the RL buffer (experience_buffer), the mix strategy's expert rows (auxiliary_buffers) and held-out pairs
    (eval_pairs), each reading other columns."""
    dataset: dict[str, Entry] = {
        "storage_type": validated(note="'file' cannot stream experiences; queue and sqlite both mean the experiment's "
                                       "SQLite buffer"),
        "format.prompt_type[chatpair]": refused("SFT and DPO rows are 'messages' or 'plaintext' (a prompt column and "
                                                "the response columns), as in Trinity"),
        "format.response_key": honoured().warn_if(lambda v, c: is_preference_loss(c.algorithm.policy_loss_fn),
                                                  NOT_PAIR_RESPONSE),
        "format.chosen_key": honoured().warn_if(_not_preference, ONLY_PREFERENCE),
        "format.rejected_key": honoured().warn_if(_not_preference, ONLY_PREFERENCE),
        "generator_args": honoured(note="the rows of SFT data at path generator:NAME"),
        "capacity": warned("the SQLite buffer has no capacity limit (the schedule bounds how far the explorer runs ahead)"),
        "max_read_timeout": warned("the trainer waits for the explorer's experiences up to synchronizer.sync_timeout"),
    }
    # In an RL mode the trainer reads the experiment's own buffer, not these.
    experience_buffer = {**dataset, **{key: dataset.get(key, honoured()).warn_if(_rl_mode, f"not used: {RL_BUFFER}")
                                       for key in ("path", "subset_name", "split", *(f"format.{f}" for f in (
                                           "prompt_type", "prompt_key", "response_key", "system_prompt_key",
                                           "system_prompt", "messages_key", "chat_template")))}}
    # Expert rows (tasks/sft.py) and held-out pairs (tasks/dpo.py, scored at each evaluation) are no RL buffer.
    auxiliary = {**dataset,
                 "storage_type": warned("an auxiliary buffer is a dataset the trainer reads (its path); the storage "
                                        "type does not matter"),
                 **dict.fromkeys(("format.chosen_key", "format.rejected_key"),
                                 warned("not read: expert rows are a prompt and a response (response_key)"))}
    pairs = {**dataset,
             "storage_type": warned("held-out pairs are a dataset (its path); the storage type does not matter"),
             "format.response_key": warned("not read: a pair's responses are format.chosen_key and format.rejected_key"),
             "format.chosen_key": honoured(), "format.rejected_key": honoured()}
    return {
        **{f"experience_buffer.{key}": entry for key, entry in experience_buffer.items()},
        "auxiliary_buffers": honoured().warn_if(
            lambda v, c: c.algorithm.sample_strategy != "mix",
            "read only by algorithm.sample_strategy 'mix' (its expert rows); no other strategy reads it"),
        **{f"auxiliary_buffers[].{key}": entry for key, entry in auxiliary.items()},
        "eval_pairs": honoured().warn_if(
            lambda v, c: v is not None and not stage_kind(c).trains,
            "scored by the trainer, which only a run that trains holds (mode 'both', 'colocate' or 'train')"),
        **{f"eval_pairs.{key}": entry for key, entry in pairs.items()},
    }


class TrainerInput(Section):
    """What the trainer reads."""

    SETTINGS: ClassVar[dict[str, Entry]] = _trainer_input_settings()
    NOT_HERE: ClassVar[dict[str, str]] = {
        "sft_warmup_dataset": "Trinity's old warm-up is not run; add a first stage instead (stage_name sft_warmup, mode "
                              "train, algorithm_type sft, this dataset as its buffer.trainer_input.experience_buffer), "
                              "then a stage rft",
        "sft_warmup_steps": "Trinity's old warm-up is not run; use a first stage with algorithm sft and "
                            "buffer.total_steps (see buffer.trainer_input.sft_warmup_dataset)"}

    experience_buffer: StorageConfig | None = Field(
        None, description="Experiences from the explorer (mode both: a queue, derived when unset), "
        "or a dataset (mode train, e.g. SFT)."
    )
    auxiliary_buffers: dict[str, StorageConfig] = Field(
        default_factory=dict, description="Datasets the trainer reads beside its experiences, by name: the mix "
        "sample strategy's expert rows (algorithm.sample_strategy_args.sft_dataset_name, default 'sft_dataset'; "
        "docs/mix.md)."
    )
    eval_pairs: StorageConfig | None = Field(
        None, description="Held-out preference pairs (format.chosen_key / rejected_key), scored at every evaluation "
        "by the trained weights: eval/<name>/preference_accuracy (the share of pairs whose chosen response has the "
        "higher log-probability) and preference_margin (their mean log-probability difference; docs/dpo.md)."
    )


class BufferConfig(Section):
    """Batch sizes, length of the run, and the explorer/trainer inputs."""

    batch_size: int = Field(1, ge=1, description="Tasks per explore step.")
    train_batch_size: int | None = Field(
        None, ge=1, description="Experiences per train step; None: batch_size × algorithm.repeat_times (derived). "
        "Required in mode train and for sft/dpo."
    )
    total_epochs: int = Field(1, ge=1, description="Passes over the training task set.")
    total_steps: int | None = Field(None, ge=1, description="Stop after this many steps; None: total_epochs decides.")
    explorer_input: ExplorerInput = Field(default_factory=ExplorerInput, description="Explorer input.")
    trainer_input: TrainerInput = Field(default_factory=TrainerInput, description="Trainer input.")

    @model_validator(mode="before")
    @classmethod
    def _zero_means_unset(cls, data: Any) -> Any:
        # Trinity writes train_batch_size: 0 for "derive it".
        if isinstance(data, dict) and data.get("train_batch_size") == 0:
            data = {k: v for k, v in data.items() if k != "train_batch_size"}
        return data
