"""What every kind of data row has, a task set's (schemas/taskset.py) and a dataset's the trainer reads
(schemas/buffer.py): where it is read from and its common columns."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from schemas.base import Section
from schemas.trinity.names import STORAGE_TYPE_ALIASES

StorageType = Literal["file", "queue", "sqlite"]


def storage_alias(data: Any) -> Any:
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


class RowFormat(Section):
    """The columns every kind of row has."""

    NOT_HERE: ClassVar[dict[str, str]] = {"tools_key": NO_TOOLS, "reply_prefix": NO_REPLY_PREFIX}

    prompt_key: str = Field("prompt", description="Column holding the user prompt.")
    response_key: str = Field("response", description="Column holding the reference answer / response.")
    system_prompt_key: str | None = Field(None, description="Column holding a per-row system prompt.")
    system_prompt: str | None = Field(None, description="System prompt for every row (after system_prompt_key).")


class DatasetFields(Section):
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
        return storage_alias(data)
