"""Typed settings of the whole project (pydantic v2). `ExperimentConfig` is the entry point."""

from schemas.algorithm import AlgorithmConfig, FilterGroupsConfig, OptimizerConfig
from schemas.base import ConfigRuleError, Section
from schemas.buffer import BufferConfig, DataFormat, StorageConfig, TrainerInput
from schemas.cluster import ClusterConfig
from schemas.experiment import ExperimentConfig
from schemas.experiment_fields import StageConfig
from schemas.explorer import ExplorerConfig, InferenceModelConfig, TinkerSamplerConfig, VllmModelConfig
from schemas.model import LoRAConfig, ModelConfig
from schemas.monitor import GateConfig, MonitorConfig
from schemas.overrides import UnknownSettingError, parse_set_args
from schemas.synchronizer import SynchronizerConfig
from schemas.taskset import ExplorerInput, GenerationConfig, TaskFormat, TaskSelectorConfig, TasksetConfig
from schemas.trainer import TinkerTrainerConfig, TorchTrainerConfig, TrainerConfig, VerlTrainerConfig
from schemas.trinity.aliases import TrinityTinkerConfig

__all__ = [
    "AlgorithmConfig",
    "BufferConfig",
    "ClusterConfig",
    "ConfigRuleError",
    "ExperimentConfig",
    "ExplorerConfig",
    "ExplorerInput",
    "FilterGroupsConfig",
    "DataFormat",
    "TaskFormat",
    "GenerationConfig",
    "InferenceModelConfig",
    "LoRAConfig",
    "ModelConfig",
    "GateConfig",
    "MonitorConfig",
    "OptimizerConfig",
    "Section",
    "StageConfig",
    "StorageConfig",
    "SynchronizerConfig",
    "TaskSelectorConfig",
    "TasksetConfig",
    "TinkerSamplerConfig",
    "TinkerTrainerConfig",
    "TorchTrainerConfig",
    "TrainerConfig",
    "TrainerInput",
    "TrinityTinkerConfig",
    "VerlTrainerConfig",
    "VllmModelConfig",
    "UnknownSettingError",
    "parse_set_args",
]

from schemas.errors import describe_errors, error_items  # noqa: E402
from schemas.trinity.importer import TrinityImportError, import_trinity  # noqa: E402

__all__ += ["TrinityImportError", "describe_errors", "error_items", "import_trinity"]
