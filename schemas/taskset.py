"""`buffer.explorer_input`: the task sets the explorer rolls out, for training and evaluation, and how the runtime
treats their settings beyond reading them (each class's `SETTINGS`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator, model_validator

from schemas.base import Entry, Section, honoured, resolved, validated, warned
from schemas.dataset import ONLY_SFT_DATA, PAIRS_NOT_TASKS, DatasetFields, RowFormat
from schemas.rewards import MATH_WORKFLOW_REWARD_FNS
from schemas.trinity.names import SELECTOR_TYPE_ALIASES
from schemas.trinity.workflows import CLASS_PATH, R3L, REFUSED_REWARD_FNS, is_class_path, is_r3l
from schemas.trinity.workflows import NOT_BUILT as TRINITY_WORKFLOWS_NOT_BUILT

# math_workflow and its calculator variant (workflows/calculator.py): one prompt, one scoring, no workflow_args.
MATH_WORKFLOWS = ("math_workflow", "math_calculator_workflow")


def _args_of_math_workflow(value: Any, config: Any) -> bool:
    """These workflow_args belong to a taskset rolled out by math_workflow, which takes none."""
    return any(ts.workflow_args is value and ts.default_workflow_type in MATH_WORKFLOWS and not ts.format.workflow_key
               for ts in config.buffer.explorer_input.tasksets())


def _base_prompt_outside_math_workflow(value: Any, config: Any) -> bool:
    """A task set asks for a plain-text prompt but a workflow other than math_workflow may run it."""
    return bool(value) and any(
        ts.format.base_model_prompt and (ts.default_workflow_type not in MATH_WORKFLOWS or ts.format.workflow_key)
        for ts in config.buffer.explorer_input.tasksets())


def _unknown_reward_fn(value: Any, config: Any) -> bool:
    return value is not None and value not in MATH_WORKFLOW_REWARD_FNS and value not in REFUSED_REWARD_FNS


def _trinity_math_reward(value: Any, config: Any) -> bool:
    return value == "math_reward"


def _refuse_trinity_workflows(entry: Entry) -> Entry:
    for name, reason in TRINITY_WORKFLOWS_NOT_BUILT.items():
        entry = entry.refuse_if(lambda v, c, name=name: str(v).lower() == name.lower(), f"Trinity's {name!r}: {reason}")
    return entry.refuse_if(lambda v, c: is_r3l(v), R3L).refuse_if(lambda v, c: is_class_path(v), CLASS_PATH)


def _reward_fn_type() -> Entry:
    entry = honoured(note="math_workflow checks it")
    for name, reason in REFUSED_REWARD_FNS.items():
        entry = entry.refuse_if(lambda v, c, name=name: v == name, f"Trinity's {name!r}: {reason}")
    return entry.refuse_if(
        _unknown_reward_fn, f"math_workflow scores with its own reward; known: {', '.join(MATH_WORKFLOW_REWARD_FNS)}"
    ).warn_if(_trinity_math_reward, "math_workflow scores math-verify accuracy plus a format bonus for a boxed answer "
                                    "(Trinity's math_boxed_reward); math_reward's <think>/<answer> bonus is not given")


class TaskFormat(RowFormat):
    """How a task set's rows map to prompts and answers."""

    NOT_HERE: ClassVar[dict[str, str]] = {
        **RowFormat.NOT_HERE,
        "prompt_type": "math_workflow renders the prompt_key column as a chat; prompt_type applies to SFT data",
        "messages_key": ONLY_SFT_DATA, "chosen_key": PAIRS_NOT_TASKS, "rejected_key": PAIRS_NOT_TASKS,
        "chat_template": "rollouts use model.custom_chat_template; set that instead"}
    SETTINGS: ClassVar[dict[str, Entry]] = {"base_model_prompt": honoured().refuse_if(
        _base_prompt_outside_math_workflow, "only math_workflow writes a plain-text prompt; the other workflows chat "
        "through the chat template")}

    base_model_prompt: bool = Field(
        False, description="Prompt a base model: send 'System:' + system prompt + '\\nUser:\\n' + prompt + "
        "'\\nAssistant:\\n' as plain text, without the chat template (no system prompt: from 'User:'); "
        "math_workflow only (Trinity's math_boxed_workflow use_base)."
    )
    workflow_key: str = Field("", description="Column naming a per-row workflow; '' : none.")
    reward_fn_key: str = Field("", description="Column naming a per-row reward function; '' : none.")


class GenerationConfig(Section):
    """Sampling settings of a taskset; None fields take the model section's defaults (derived)."""

    SETTINGS: ClassVar[dict[str, Entry]] = {"logprobs": warned(
        "engines record the sampled token's logprob only; top logprobs are not kept", when=lambda v, c: v is not None and v > 0)}

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


def _train_selector(config: Any) -> TaskSelectorConfig | None:
    taskset = config.buffer.explorer_input.taskset
    return taskset.task_selector if taskset is not None else None


def _no_features(value: Any, config: Any) -> bool:
    selector = _train_selector(config)
    return selector is None or selector.selector_type not in FEATURE_SELECTORS


def _not_difficulty_based(value: Any, config: Any) -> bool:
    selector = _train_selector(config)
    return selector is None or selector.selector_type != "difficulty_based"


def _harder_when_unread(value: Any, config: Any) -> bool:
    """harder_when orders offline_easy2hard and ranks difficulty_based's features for its prior rank only."""
    selector = _train_selector(config)
    return _no_features(value, config) or (selector is not None and selector.selector_type == "difficulty_based"
                                           and selector.kwargs.prior != "rank")


class TaskSelectorConfig(Section):
    """Which tasks each batch reads (Trinity alias: data_selector; buffer/selectors.py)."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "feature_keys": honoured(note="every row's, checked before the run (preflight/data.py)").warn_if(
            _no_features, "read by the offline_easy2hard and difficulty_based selectors only"),
        "harder_when": honoured().warn_if(_harder_when_unread, "read by offline_easy2hard and difficulty_based's prior "
                                                               "rank only"),
        **{f"kwargs.{arg}": honoured().warn_if(_not_difficulty_based, "only the difficulty_based selector reads kwargs")
           for arg in DifficultyArgs.model_fields}}

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


class TasksetConfig(DatasetFields):
    """A set of tasks the explorer rolls out (training or evaluation)."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "storage_type": validated(note="task sets are read from files"),
        "workflow_args": honoured(note="math_workflow takes none").refuse_if(
            _args_of_math_workflow, "math_workflow takes no workflow_args (q20, gsm8k_tool_agent and llm_judge_workflow do)"),
        "generator_args": honoured(note="checked against its generator's model, rows from generators/"),
        "default_workflow_type": _refuse_trinity_workflows(honoured()),
        "default_reward_fn_type": _reward_fn_type()}

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


# Evaluation reads every task once, in file order.
_EVAL_ORDER = warned("evaluation reads every task of the eval taskset once; the order does not matter")


class ExplorerInput(Section):
    """What the explorer reads."""

    # The defaults are derived into each task set (derived values are not checked): the same refusals. An entry below
    # eval_tasksets[] takes the place of the task set's own there.
    SETTINGS: ClassVar[dict[str, Entry]] = {
        "default_workflow_type": _refuse_trinity_workflows(honoured()),
        "default_eval_workflow_type": _refuse_trinity_workflows(resolved(
            "buffer.explorer_input.eval_tasksets[].default_workflow_type")),
        "default_reward_fn_type": replace(resolved("buffer.explorer_input.taskset.default_reward_fn_type"),
                                          rules=TasksetConfig.SETTINGS["default_reward_fn_type"].rules),
        **{f"eval_tasksets[].task_selector.{key}": _EVAL_ORDER for key in (
            *(f for f in TaskSelectorConfig.model_fields if f != "kwargs"), *TaskSelectorConfig.SETTINGS)}}

    taskset: TasksetConfig | None = Field(None, description="Training tasks (Trinity alias: tasksets, one item).")
    eval_tasksets: list[TasksetConfig] = Field(default_factory=list, description="Evaluation task sets.")
    default_workflow_type: str | None = Field(None, description="Workflow for task sets that name none.")
    default_eval_workflow_type: str | None = Field(
        None, description="Workflow for eval task sets that name none (before default_workflow_type)."
    )
    default_reward_fn_type: str | None = Field(None, description="Reward function for task sets that name none.")

    def tasksets(self) -> list[TasksetConfig]:
        """The training task set (where there is one), then the eval task sets."""
        return [ts for ts in (self.taskset, *self.eval_tasksets) if ts is not None]

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


