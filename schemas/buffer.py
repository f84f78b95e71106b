"""`buffer`: task sets the explorer reads, the experience buffer the trainer reads, batch sizes."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator, model_validator

from schemas.base import Section
from schemas.trinity.names import SELECTOR_TYPE_ALIASES, STORAGE_TYPE_ALIASES

StorageType = Literal["file", "queue", "sqlite"]


def _storage_alias(data: Any) -> Any:
    # Trinity spells the SQL storage "sql"; its selector was called data_selector before task_selector.
    if isinstance(data, dict):
        data = dict(data)
        if isinstance(data.get("storage_type"), str):
            data["storage_type"] = STORAGE_TYPE_ALIASES.get(data["storage_type"].lower(), data["storage_type"].lower())
        if "data_selector" in data:
            if "task_selector" in data:
                raise ValueError("data_selector is Trinity's old name of task_selector; set only one of them")
            data["task_selector"] = data.pop("data_selector")
    return data


# Why a column setting of one kind of data is not a setting of the other (Section.NOT_HERE)
NOT_TASKS = "a trainer input is not rolled out as tasks: the setting has no effect"
ONLY_SFT_DATA = "only a dataset's rows (mode train with algorithm sft or dpo) are read through this format"
PAIRS_NOT_TASKS = ("preference pairs are read from the trainer's dataset (buffer.trainer_input.experience_buffer, "
                   "algorithm_type dpo); a task set is rolled out, its answers are sampled")
NO_TOOLS = ("no workflow reads tools from the data: gsm8k_tool_agent's calculator is in its code "
            "(workflows/tool_agent.py)")
NO_REPLY_PREFIX = "no workflow forces the start of the reply"


class _Format(Section):
    """The columns every kind of row has."""

    NOT_HERE: ClassVar[dict[str, str]] = {"tools_key": NO_TOOLS, "reply_prefix": NO_REPLY_PREFIX}

    prompt_key: str = Field("prompt", description="Column holding the user prompt.")
    response_key: str = Field("response", description="Column holding the reference answer / response.")
    system_prompt_key: str | None = Field(None, description="Column holding a per-row system prompt.")
    system_prompt: str | None = Field(None, description="System prompt for every row (after system_prompt_key).")


class TaskFormat(_Format):
    """How a task set's rows map to prompts and answers."""

    NOT_HERE: ClassVar[dict[str, str]] = {
        **_Format.NOT_HERE,
        "prompt_type": "math_workflow renders the prompt_key column as a chat; prompt_type applies to SFT data",
        "messages_key": ONLY_SFT_DATA, "chosen_key": PAIRS_NOT_TASKS, "rejected_key": PAIRS_NOT_TASKS,
        "chat_template": "rollouts use model.custom_chat_template; set that instead"}

    base_model_prompt: bool = Field(
        False, description="Prompt a base model: send 'System:' + system prompt + '\\nUser:\\n' + prompt + "
        "'\\nAssistant:\\n' as plain text, without the chat template (no system prompt: from 'User:'); "
        "math_workflow only (Trinity's math_boxed_workflow use_base)."
    )
    workflow_key: str = Field("", description="Column naming a per-row workflow; '' : none.")
    reward_fn_key: str = Field("", description="Column naming a per-row reward function; '' : none.")


class DataFormat(_Format):
    """How the rows of a dataset the trainer reads (SFT, DPO) map to prompts and responses."""

    NOT_HERE: ClassVar[dict[str, str]] = {
        **_Format.NOT_HERE,
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


class GenerationConfig(Section):
    """Sampling settings of a taskset; None fields take the model section's defaults (derived)."""

    temperature: float | None = Field(None, ge=0, description="Sampling temperature (0: greedy).")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling p.")
    top_k: int | None = Field(None, ge=-1, description="Top-k (-1: off).")
    logprobs: int | None = Field(None, ge=0, description="Top logprobs returned per token.")
    max_tokens: int | None = Field(None, ge=1, description="Longest response; None: model.max_response_tokens.")


# Selectors that read a difficulty from each row's feature_keys (buffer/selectors.py).
FEATURE_SELECTORS = ("offline_easy2hard", "difficulty_based")


class DifficultyArgs(Section):
    """The difficulty_based selector's estimator and sampling (Trinity's task_selector.kwargs, its defaults; its
    BOTS example sets m 16, lamb 0.1, rho 0.1, target_reward 0.5, tau 0, do_sample true)."""

    m: int = Field(16, ge=1, description="Rollouts one observed pass rate counts as (Trinity's m).")
    lamb: float = Field(0.2, ge=0, le=1, description="Share of the past estimate forgotten at each update.")
    rho: float = Field(0.2, ge=0, le=1, description="Weight of the prior from the features against what was observed.")
    target_reward: float = Field(1.0, ge=0, le=1, description="Pass rate the picked tasks should have (0.5: the "
                                 "edge of what the model can do).")
    tau: float = Field(1.0, ge=0, description="Temperature of the pick: 0 takes the tasks closest to target_reward, "
                       "above 0 samples with softmax(-|target - pass rate| / tau).")
    do_sample: bool = Field(False, description="Score each task with a pass rate drawn from its Beta estimate "
                            "(explores the uncertain ones) instead of its mean.")
    adaptive_rho: bool = Field(False, description="Halve rho whenever the prior misses the observed pass rates by "
                               "0.25 or more on average.")
    prior: Literal["interpolate", "rank"] = Field(
        "interpolate", description="Pass rate of a task not yet seen, from its features. interpolate (Trinity's): two "
        "feature_keys are two reference models' pass rates, the model's lies between them at a capacity fitted to "
        "what was observed; rank: the features' rank is a difficulty in [0, 1] (harder_when), the pass rate falls "
        "along a logistic curve around a fitted capacity (one key or more, any numbers: sizes, path lengths).")


SelectorType = Literal["sequential", "shuffle", "random", "offline_easy2hard", "difficulty_based"]


class TaskSelectorConfig(Section):
    """Which tasks each batch reads (Trinity alias: data_selector; buffer/selectors.py)."""

    selector_type: SelectorType = Field(
        "sequential", description="sequential: file order; shuffle: a seeded permutation per epoch; random: each "
        "batch drawn anew; offline_easy2hard: easiest first by feature_keys; difficulty_based: tasks whose estimated "
        "pass rate is nearest kwargs.target_reward, learnt from each step's results (docs/generators.md)."
    )
    seed: int = Field(42, description="Seed of shuffle, random and difficulty_based.")
    feature_keys: list[str] = Field(
        default_factory=list, validate_default=True, description="Row columns holding a task's difficulty (numbers; 'a.b' reads key b of "
        "column a, a mapping or JSON text), e.g. frozenlake's shortest_path; offline_easy2hard and difficulty_based.")
    harder_when: Literal["lower", "higher"] = Field(
        "lower", description="A feature marks a harder task when lower (Trinity's: reference pass rates) or higher "
        "(sizes, blanks, path lengths).")
    kwargs: DifficultyArgs = Field(default_factory=DifficultyArgs, description="difficulty_based's settings.")

    @field_validator("selector_type", mode="before")
    @classmethod
    def _selector_type(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = SELECTOR_TYPE_ALIASES.get(value, value)
            if value not in get_args(SelectorType):
                raise ValueError(f"{value!r} is not a task selector here (known: {', '.join(get_args(SelectorType))}); "
                                 "Trinity loads other selectors from its plugins, which do not run here")
        return value

    @field_validator("feature_keys")
    @classmethod
    def _feature_keys(cls, keys: list[str], info: ValidationInfo) -> list[str]:
        selector = info.data.get("selector_type")
        if selector in FEATURE_SELECTORS and not keys:
            raise ValueError(f"{selector} orders tasks by their difficulty: name the row columns that hold it")
        if len(set(keys)) != len(keys) or not all(k.strip() for k in keys):
            raise ValueError(f"feature keys must be distinct and non-empty, got {keys}")
        return keys

    @model_validator(mode="after")
    def _prior_needs_two_pass_rates(self) -> TaskSelectorConfig:
        if self.selector_type == "difficulty_based" and self.kwargs.prior == "interpolate" and len(self.feature_keys) != 2:
            raise ValueError(
                f"kwargs.prior: 'interpolate' (Trinity's, the default) reads exactly two feature_keys, two reference "
                f"models' pass rates; got {len(self.feature_keys)} ({', '.join(self.feature_keys)}). For difficulty "
                "columns (sizes, path lengths) set kwargs.prior: rank and harder_when")
        return self


class _DatasetFields(Section):
    """Fields shared by task sets and experience storages."""

    name: str = Field("", description="Name used in metrics and storage; '' : derived from the position.")
    storage_type: StorageType = Field(
        "file", description="file: a dataset folder/file or HF hub id; queue: in-memory queue; sqlite: database."
    )
    path: str | None = Field(
        None, description="Dataset folder, file, HF id, sqlite:/// URL, or a generator: 'generator:arith' "
        "(rows made from generator_args)."
    )
    subset_name: str | None = Field(None, description="Dataset config/subset name (datasets' `name`).")
    split: str = Field("train", description="Split, with slicing (e.g. 'test[:64]').")
    generator_args: dict[str, Any] = Field(
        default_factory=dict, description="Arguments of generated rows (path 'generator:NAME'), checked and "
        "completed with the generator's defaults (generators/), e.g. arith's mul_range."
    )

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        return _storage_alias(data)


class TasksetConfig(_DatasetFields):
    """A set of tasks the explorer rolls out (training or evaluation)."""

    format: TaskFormat = Field(default_factory=TaskFormat, description="Column mapping.")
    rollout_args: GenerationConfig = Field(default_factory=GenerationConfig, description="Sampling settings.")
    workflow_args: dict[str, Any] = Field(default_factory=dict, description="Extra arguments of the workflow.")
    reward_fn_args: dict[str, Any] = Field(default_factory=dict, description="Extra arguments of the reward fn.")
    repeat_times: int | None = Field(
        None, ge=1, description="Rollouts per task; None: algorithm.repeat_times (training) or 1 (evaluation)."
    )
    default_workflow_type: str | None = Field(
        None, description="Workflow that turns a task into experiences (e.g. math_workflow); "
        "None: buffer.explorer_input.default_workflow_type."
    )
    default_reward_fn_type: str | None = Field(
        None, description="Reward function; None: buffer.explorer_input.default_reward_fn_type or the workflow's."
    )
    task_selector: TaskSelectorConfig = Field(
        default_factory=TaskSelectorConfig, description="Task order (Trinity alias: data_selector)."
    )


# Trinity's storage has a task set's fields too; a dataset the trainer reads is never rolled out here.
_IN_FILE_ORDER = "SFT rows are read in file order, batch after batch"


class StorageConfig(_DatasetFields):
    """Where experiences (or SFT/DPO rows) are kept for the trainer: a dataset it reads, or in an RL mode the
    experiment's own buffer."""

    NOT_HERE: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("rollout_args", "workflow_args", "reward_fn_args", "repeat_times", "default_workflow_type",
                         "default_reward_fn_type"), NOT_TASKS),
        "task_selector": _IN_FILE_ORDER, "data_selector": _IN_FILE_ORDER}

    format: DataFormat = Field(default_factory=DataFormat, description="Column mapping.")
    capacity: int = Field(10000, ge=1, description="Queue capacity in experiences (queue storage).")
    max_read_timeout: float = Field(1800, gt=0, description="Seconds a reader waits for data before failing.")


class ExplorerInput(Section):
    """What the explorer reads."""

    taskset: TasksetConfig | None = Field(None, description="Training tasks (Trinity alias: tasksets, one item).")
    eval_tasksets: list[TasksetConfig] = Field(default_factory=list, description="Evaluation task sets.")
    default_workflow_type: str | None = Field(None, description="Workflow for task sets that name none.")
    default_eval_workflow_type: str | None = Field(
        None, description="Workflow for eval task sets that name none (before default_workflow_type)."
    )
    default_reward_fn_type: str | None = Field(None, description="Reward function for task sets that name none.")

    @model_validator(mode="before")
    @classmethod
    def _tasksets_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tasksets" in data:
            data = dict(data)
            tasksets = data.pop("tasksets") or []
            if not isinstance(tasksets, list):
                raise ValueError(f"buffer.explorer_input.tasksets: a list of task sets, not {type(tasksets).__name__}")
            if "taskset" in data and data["taskset"] is not None and tasksets:
                raise ValueError("buffer.explorer_input: set taskset or tasksets (Trinity alias), not both")
            if len(tasksets) > 1:
                raise ValueError(
                    f"buffer.explorer_input.tasksets: {len(tasksets)} training task sets given; one is supported"
                )
            if tasksets:
                data["taskset"] = tasksets[0]
        return data


class TrainerInput(Section):
    """What the trainer reads."""

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
