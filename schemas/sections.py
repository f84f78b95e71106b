"""What the rules of one section may read of the others: the experiment's mode and the sections below the backends'.

A Protocol, so that the backends' settings classes (schemas/trainer.py, schemas/explorer.py) and the stage kind name no
module above them: `ExperimentConfig` is one. A rule that joins a backend's section with another backend's sits on
the experiment (schemas/rules.py), which passes what it needs explicitly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

if TYPE_CHECKING:
    from schemas.algorithm import AlgorithmConfig
    from schemas.cluster import ClusterConfig
    from schemas.model import ModelConfig
    from schemas.taskset import ExplorerInput

Mode = Literal["both", "explore", "train", "bench", "serve", "colocate"]


class BufferInputs(Protocol):
    """What the rules of other sections read of the buffer: its task sets (the buffer's own rules ask the stage kind,
    which reads this, so naming BufferConfig here would close an import circle)."""

    explorer_input: ExplorerInput


class Sections(Protocol):
    mode: Mode
    derived: dict[str, str]  # values the schema filled in: {dotted.path: reason}
    warnings: list[str]
    algorithm: AlgorithmConfig
    model: ModelConfig
    cluster: ClusterConfig
    buffer: BufferInputs


class TrainedWeights(Protocol):
    """What an engine's rules ask of the trainer's settings (schemas/trainer.py): the weights it trains and its name."""

    WEIGHTS: ClassVar[str]  # "local" (folders and tensors) or "tinker" (tinker:// paths)
    trainer_type: str
