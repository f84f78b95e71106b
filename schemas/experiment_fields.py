"""The fields of an experiment and its stages, before the rules that join the sections: `ExperimentFields` is what
schemas/rules.py and the sections' conditions read, and `ExperimentConfig` (schemas/experiment.py) is it validated by them.
Two modules so that the rules name only what is below them (no import circle, type-checking imports included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from schemas.algorithm import AlgorithmConfig
from schemas.base import STAGE_CHAIN, ConfigRuleError, Entry, Section, honoured, kept, resolved
from schemas.budget import BudgetConfig
from schemas.buffer import BufferConfig
from schemas.cluster import ClusterConfig
from schemas.data_processor import DataProcessorConfig
from schemas.explorer import ExplorerConfig
from schemas.model import ModelConfig
from schemas.monitor import MonitorConfig
from schemas.overrides import strip_paths
from schemas.paths import check_component, component_problem
from schemas.sections import Mode
from schemas.synchronizer import SynchronizerConfig
from schemas.trainer import TrainerConfig, VerlTrainerConfig
from schemas.trinity.aliases import apply_aliases


class StageConfig(Section):
    """One stage: a name, an optional mode and whole sections that replace the base config's."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "stage_name": resolved("name", note="each stage is validated as a whole config named {name}/{stage_name}"),
        "mode": resolved("mode"),
    }

    stage_name: str = Field(
        ..., min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="Stage name; also its sub-folder of the experiment."
    )
    mode: Mode | None = Field(None, description="Mode of this stage; None: the base config's mode.")
    algorithm: AlgorithmConfig | None = Field(None, description="Replaces the whole algorithm section.")
    model: ModelConfig | None = Field(None, description="Replaces the whole model section.")
    cluster: ClusterConfig | None = Field(None, description="Replaces the whole cluster section.")
    buffer: BufferConfig | None = Field(None, description="Replaces the whole buffer section.")
    explorer: ExplorerConfig | None = Field(None, description="Replaces the whole explorer section.")
    trainer: TrainerConfig | None = Field(None, description="Replaces the whole trainer section.")
    synchronizer: SynchronizerConfig | None = Field(None, description="Replaces the whole synchronizer section.")
    monitor: MonitorConfig | None = Field(None, description="Replaces the whole monitor section.")

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        return apply_aliases(data, note=False) if isinstance(data, dict) else data

    @field_validator("stage_name")
    @classmethod
    def _one_folder(cls, value: str) -> str:
        return check_component(value)


class ExperimentFields(Section):
    """The fields of a whole experiment, before the rules that join its sections (schemas/rules.py), which
    `ExperimentConfig` (schemas/experiment.py) applies: what those rules read, so that they name no module above them."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "mode[colocate]": honoured(note="on CPU: the in-turns plan of mode both; refused on GPUs (schemas/rules.py)"),
        "group": honoured(note="a tag of the experiment's MLflow runs, the W&B group"),
        "checkpoint_root_dir": honoured(note="and every path through experiment_dir"),
        "derived": honoured(note="an output"),
        "warnings": honoured(note="an output"),
    }

    mode: Mode = Field(
        "both",
        description="both: explore and train together; explore: rollouts only; train: train on a dataset/buffer; "
        "bench: evaluate checkpoints; serve: serve the model; colocate: explorer and trainer share devices.",
    )
    project: str = Field(..., min_length=1, description="Project name (checkpoint folder level, MLflow experiment).")
    group: str = Field("", description="Group of related experiments (a tag).")
    name: str = Field(..., min_length=1, description="Experiment name; checkpoints go to {checkpoint_root_dir}/{project}/{name}.")
    checkpoint_root_dir: str = Field("./checkpoints", description="Root folder of all checkpoints and run data.")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="Algorithm, losses and optimizer.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="Policy model and token budget.")
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="Ray cluster and devices.")
    buffer: BufferConfig = Field(default_factory=BufferConfig, description="Batch sizes, task sets, experience buffer.")
    explorer: ExplorerConfig = Field(default_factory=ExplorerConfig, description="Rollout engines and evaluation.")
    trainer: TrainerConfig = Field(
        default_factory=VerlTrainerConfig, description="Training backend: trainer_type torch, verl or tinker, and its settings."
    )
    synchronizer: SynchronizerConfig = Field(
        default_factory=SynchronizerConfig, description="Weight sync from trainer to engines."
    )
    monitor: MonitorConfig = Field(default_factory=MonitorConfig, description="Metrics tracking.")
    budget: BudgetConfig = Field(
        default_factory=BudgetConfig, description="Limits at which a run stops cleanly (tokens, wall time); resumable."
    )
    data_processor: DataProcessorConfig = Field(
        default_factory=DataProcessorConfig, description="Trinity's data processor: operators on each explore step's "
        "experiences (the experience pipeline, buffer/operators.py)."
    )
    stages: list[StageConfig] = Field(
        default_factory=list,
        description="Ordered stages (e.g. SFT warm-up, then RFT); each replaces the sections it sets. Empty: one "
        "stage, this config.",
    )
    derived: dict[str, str] = Field(
        default_factory=dict,
        description="Output: values the schema filled in, as {dotted.path: reason}. Re-derived on validation.",
        json_schema_extra={"readOnly": True},
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="Output: settings that have no effect, and why.",
        json_schema_extra={"readOnly": True},
    )

    # ------------------------------------------------------------------ validation
    @field_validator("project")
    @classmethod
    def _project_is_one_folder(cls, value: str) -> str:
        return check_component(value)

    @model_validator(mode="before")
    @classmethod
    def _forget_derived(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        derived = data.get("derived") or {}
        recomputable = [p for p, why in derived.items() if not kept(why)]
        data = strip_paths(data, recomputable) if recomputable else dict(data)
        data["derived"] = {p: why for p, why in derived.items() if kept(why)}
        data["warnings"] = []
        return apply_aliases(data)

    def _check_name(self) -> None:
        """`name` is one folder; a stage's own config is named "{name}/{stage_name}" (stage chaining)."""
        chained = str(self.derived.get("name", "")).startswith(STAGE_CHAIN)
        parts = self.name.split("/")
        if chained and len(parts) >= 2:  # "{base name}/{stage_name}", once per level of stages
            problems = [component_problem(p) for p in parts]
        else:
            problems = [component_problem(self.name)]
        found = [p for p in problems if p]
        if found:
            raise ConfigRuleError([("name", found[0])])

    # ------------------------------------------------------------------ contract API
    @property
    def experiment_dir(self) -> Path:
        """{checkpoint_root_dir}/{project}/{name}; a stage's name is "{name}/{stage_name}"."""
        return Path(self.checkpoint_root_dir) / self.project / self.name

    @property
    def final_model_dir(self) -> Path:
        """Where the runtime writes the final Hugging Face model: {experiment_dir}/final/huggingface."""
        return self.experiment_dir / "final" / "huggingface"

    def user_data(self) -> dict[str, Any]:
        """What the user set (no schema defaults, no derived values), as plain data."""
        data = self.model_dump(mode="json", exclude_unset=True, exclude={"derived", "warnings"})
        recomputable = [p for p, why in self.derived.items() if not kept(why)]
        data = strip_paths(data, recomputable)
        own = {p: why for p, why in self.derived.items() if kept(why)}
        if own:
            data["derived"] = own
        return data
