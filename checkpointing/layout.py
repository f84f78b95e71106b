"""Where everything of an experiment lives on disk (Trinity-RFT's layout).

    {checkpoint_root_dir}/{project}/{name}/
        global_step_N/actor/            trainer state (trainer_state.json, trainable.safetensors,
                                        optim_state.pt; or veRL's model_world_size_W_rank_R.pt shards)
        global_step_N/actor/huggingface/  config, tokenizer, chat template, generation config and,
                                        once converted, model.safetensors
        global_step_N/critic/           the critic of advantage_fn 'ppo' (backends/critic.py)
        global_step_N/trainer_meta.json the train step and the buffer's read position at that step
        trainer_meta.json               the same, of the latest checkpoint
        latest_checkpointed_iteration.txt  latest_state_dict_iteration.txt
        buffer/experiences.db           every experience, as it is produced
        sync/v{N}/                      weights version N exported for the engines (sync_method checkpoint)
        sync/published.json             the versions the trainer published, for explorers in other processes
        sync/serving.json               the version the engines serve
        log/                            reward curve, restarts.json, the MLflow spool (while the server is
                                        down), TensorBoard or W&B logs (tracking/)
        final/huggingface/              the trained model at the end of a stage
        eval_at_start.json              the evaluation before training (kept for a resumed run)
        summary.json                    written when the stage is complete

A checkpoint is written under a temporary name and renamed when complete, and renamed away before it is
deleted (trainer.max_checkpoints_to_keep), so a folder named global_step_N is always whole.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schemas import ExperimentConfig

STEP_DIR = re.compile(r"^global_step_(\d+)$")
DELETING_DIR = re.compile(r"^\.global_step_(\d+)\.deleting$")  # deleting_step_dir
LATEST_CHECKPOINT = "latest_checkpointed_iteration.txt"
LATEST_STATE_DICT = "latest_state_dict_iteration.txt"
TRAINER_META = "trainer_meta.json"
SUMMARY = "summary.json"
EVAL_AT_START = "eval_at_start.json"
GATE = "gate.json"  # the promotion gate's decision (flows/gate.py), beside the last stage's summary
USAGE = "usage.json"  # what each step used (tracking/usage.py): a resume counts on from its checkpoint
BUFFER_DB = Path("buffer") / "experiences.db"
# A converted model (actor/huggingface/) is one model.safetensors up to this size, above it shards + an index.
DEFAULT_MAX_SHARD_SIZE = "5GB"


class PathEscapeError(ValueError):
    """A folder the run would write, rename or delete resolves outside the folder it must stay in."""


def inside(root: Path, path: Path, what: str) -> Path:
    """`path` resolved (symlinks followed), when that is `root` (resolved) or below it; else PathEscapeError."""
    real_root, real = root.resolve(), path.resolve()
    if real != real_root and not real.is_relative_to(real_root):
        raise PathEscapeError(f"{what} {path} resolves to {real}, outside {real_root}: refused (a symlink?)")
    return real


def experiment_dir(config: ExperimentConfig) -> Path:
    """The experiment's folder ({checkpoint_root_dir}/{project}/{name}, `config.experiment_dir`) made
    absolute: a path handed to another process or actor names the same folder whatever its working directory.
    It must resolve inside checkpoint_root_dir (the schema keeps `project` and `name` single folder names;
    this catches a symlinked project or experiment folder)."""
    root = Path(config.checkpoint_root_dir)
    return inside(root, config.experiment_dir, f"the experiment folder of {config.project}/{config.name}")


def partial_step_dir(experiment_dir: Path, step: int) -> Path:
    """Where a checkpoint is written before it is renamed to `step_dir` (never matches STEP_DIR)."""
    return experiment_dir / f".global_step_{step}.partial"


def deleting_step_dir(experiment_dir: Path, step: int) -> Path:
    """Where a pruned checkpoint is moved before it is deleted (never matches STEP_DIR)."""
    return experiment_dir / f".global_step_{step}.deleting"


def sync_dir(experiment_dir: Path) -> Path:
    return experiment_dir / "sync"


PUBLISHED = "published.json"
SERVING = "serving.json"  # the weights the engines serve (a revived engine loads them too)


def log_dir(experiment_dir: Path) -> Path:
    return experiment_dir / "log"


def final_link(experiment_dir: Path) -> Path:
    """final -> global_step_N/actor, so final/huggingface is the converted model of the last step."""
    return experiment_dir / "final"


def step_dir(experiment_dir: Path, step: int) -> Path:
    return experiment_dir / f"global_step_{step}"


def actor_dir(experiment_dir: Path, step: int) -> Path:
    return step_dir(experiment_dir, step) / "actor"


def hf_dir(experiment_dir: Path, step: int) -> Path:
    return actor_dir(experiment_dir, step) / "huggingface"


def complete_steps(experiment_dir: Path) -> list[int]:
    """Steps with a whole checkpoint (temporary folders never match the name)."""
    if not experiment_dir.is_dir():
        return []
    steps = [int(m.group(1)) for p in experiment_dir.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name))]
    return sorted(steps)


def latest_step(experiment_dir: Path) -> int | None:
    marker = experiment_dir / LATEST_CHECKPOINT
    if marker.exists():
        step = int(marker.read_text().strip())
        if step_dir(experiment_dir, step).is_dir():
            return step
    steps = complete_steps(experiment_dir)
    return steps[-1] if steps else None


def enclosing_step_dir(path: Path) -> Path | None:
    """The `global_step_N` folder `path` is, or is inside of (e.g. `.../global_step_120/actor`)."""
    path = path.resolve()
    return next((p for p in (path, *path.parents) if STEP_DIR.match(p.name)), None)


def find_step_dirs(path: Path) -> list[Path]:
    """`path` inside a checkpoint: that one; else every `global_step_N` below it, by folder then step."""
    inside = enclosing_step_dir(path)
    if inside is not None:
        return [inside]
    found = [p for p in path.resolve().rglob("global_step_*") if p.is_dir() and STEP_DIR.match(p.name)]
    # a step folder is never searched for nested ones (they would be trainer internals)
    found = [p for p in found if enclosing_step_dir(p.parent) is None]
    return sorted(found, key=lambda p: (str(p.parent), int(STEP_DIR.match(p.name).group(1))))
