"""`data_processor` (Trinity-RFT's section): the experience pipeline's operators, applied to each explore step's
experiences before their advantages (buffer/operators.py). Data-Juicer's task pipeline is refused with why
(Data-Juicer is not installed: NOT_HERE)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from schemas.base import Section

# The experience pipeline's built-in operators and their arguments' defaults (Trinity's names; the functions:
# buffer/operators.py). An operator's `args` are checked against these (schemas/rules.py).
OPERATOR_ARGS: dict[str, dict[str, Any]] = {
    "reward_filter": {"threshold": 0.0},
    "reward_std_filter": {"threshold": 0.0},
    "invalid_reward_filter": {},
    "reward_shaping_mapper": {"reward_shaping_configs": []},
    "pass_rate_calculator": {},
    "mask_response_truncated": {},
}
# Trinity's operator that hands experiences to Data-Juicer, which is not a dependency here.
DATA_JUICER = "data_juicer"


class OperatorConfig(Section):
    """One operator of the experience pipeline: its name and arguments (Trinity's layout)."""

    name: str = Field(..., min_length=1, description="reward_filter, reward_std_filter, invalid_reward_filter, "
                      "reward_shaping_mapper, pass_rate_calculator, mask_response_truncated, or data_juicer (where "
                      "Data-Juicer is installed). Trinity's dapo_dynamic_sampling is algorithm.filter_groups here.")
    args: dict[str, Any] = Field(default_factory=dict, description="The operator's arguments (buffer/operators.py).")


class ExperiencePipelineConfig(Section):
    """Operators applied in order to every explore step's experiences, before their advantages and the buffer."""

    NOT_HERE: ClassVar[dict[str, str]] = dict.fromkeys(
        ("inputs", "output"), "Trinity's experimental pipeline buffers: the pipeline here reads the explore step's "
        "experiences and writes the trainer's buffer")

    operators: list[OperatorConfig] = Field(default_factory=list, description="The operators, in order.")
    save_input: bool = Field(True, description="Also keep the experiences as they were before the operators (JSON "
                             "lines in the experiment folder).")
    input_save_path: str | None = Field(
        None, description="Where save_input writes, relative to the experiment folder; None: "
        "experience_pipeline/input.jsonl.")


class DataProcessorConfig(Section):
    """Trinity's data processor: the experience pipeline (Trinity's task pipeline runs Data-Juicer: NOT_HERE)."""

    NOT_HERE: ClassVar[dict[str, str]] = {
        "task_pipeline": "a Data-Juicer pipeline over the task set: Data-Juicer (py-data-juicer) is not a dependency "
                         "here; prepare the task set before the run"}

    experience_pipeline: ExperiencePipelineConfig | None = Field(
        None, description="Operators on each explore step's experiences (buffer/operators.py).")
