"""Tasksets: read a dataset into `Task`s and hand them out batch by batch, epoch after epoch.

One reader for every source `datasets.load_dataset` understands: a local folder holding
`{split}.jsonl` / `.json` / `.parquet` (our bundled `data/gsm8k`), a single file, or a Hugging Face hub
id; and generated tasksets (`path: "generator:arith"`, rows made in memory by generators/).
Split slicing (`"test[:64]"`, `"train[10%:20%]"`) works everywhere, and task ids always use the
*absolute* row index so a task keeps its id whatever slice it was read through.

`TasksetReader` owns the position in the taskset as (epoch, offset); it is saved in checkpoints and
restored exactly on resume (issue 4).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buffer.selectors import SELECTORS, build_selector
from buffer.task import Task
from generators import generator_name
from schemas import StorageConfig, TasksetConfig

if TYPE_CHECKING:
    from schemas import TaskSelectorConfig

# A task set the explorer rolls out, or a dataset the trainer reads (its rows as tasks with no rollout settings)
Source = TasksetConfig | StorageConfig

# File types a local taskset may be, and the `datasets` builder that reads each.
_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class TasksetError(ValueError):
    """A taskset cannot be read: the message names the taskset, the file and the line/row or key."""


# --------------------------------------------------------------------------------------------------
# Locating the source
# --------------------------------------------------------------------------------------------------


def project_root() -> Path | None:
    """The folder holding this project's pyproject.toml (None for a non-editable install)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    return None


def resolve_local_path(path: str) -> Path | None:
    """`path` as an existing local file/folder: as given (cwd), else relative to the project root."""
    candidate = Path(path).expanduser()
    if candidate.exists():
        return candidate
    root = project_root()
    if not candidate.is_absolute() and root is not None and (root / candidate).exists():
        return root / candidate
    return None


def _looks_local(path: str) -> bool:
    """True for paths that cannot be a hub id, so a missing one is reported as a missing file."""
    p = Path(path)
    return (
        path.startswith((".", "/", "~"))
        or p.suffix in _BUILDERS
        or path.count("/") > 1
    )


def _split_file(folder: Path, split: str) -> Path:
    """The file holding `split` in a local dataset folder, e.g. data/gsm8k/test.jsonl."""
    for suffix in _BUILDERS:
        candidate = folder / f"{split}{suffix}"
        if candidate.is_file():
            return candidate
    found = sorted(p.name for p in folder.iterdir() if p.suffix in _BUILDERS)
    raise TasksetError(
        f"no file for split '{split}' in {folder} (expected {split}.jsonl, {split}.json or "
        f"{split}.parquet; found: {', '.join(found) or 'no data files'})"
    )


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def _first_bad_json_line(path: Path) -> str | None:
    """Locate the first malformed line of a JSON-lines file (only called after a load failed)."""
    if path.suffix != ".jsonl":
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            return f"{path}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        except UnicodeDecodeError as err:
            return f"{path}: not UTF-8 text ({err.reason} at byte {err.start})"
        return None
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as err:
                return f"{path}: line {lineno} is not UTF-8 text ({err.reason})"
            except json.JSONDecodeError as err:
                return f"{path}: malformed JSON on line {lineno}, column {err.colno}: {err.msg}"
            if not isinstance(value, dict):
                return f"{path}: line {lineno} is a JSON {type(value).__name__}, expected an object"
    return None


def _load_split(
    source: str, local: Path | None, subset_name: str | None, split: str
) -> tuple[Any, str]:
    """Load one whole split as a `datasets.Dataset`; returns it and a label for error messages."""
    import datasets  # heavy import, only when a taskset is actually read

    if local is None:  # a Hugging Face hub id
        try:
            return datasets.load_dataset(source, subset_name, split=split), f"{source}[{split}]"
        except Exception as err:
            raise TasksetError(
                f"cannot load '{source}' (subset {subset_name!r}, split '{split}') from the "
                f"Hugging Face hub, and no local file or folder has that path: {err}"
            ) from err

    file = _split_file(local, split) if local.is_dir() else local
    builder = _BUILDERS.get(file.suffix)
    if builder is None:
        raise TasksetError(
            f"{file}: unsupported taskset file type '{file.suffix}' (use .jsonl, .json or .parquet)"
        )
    try:
        # data_files keyed by the split name, so a single file serves whatever split is asked for.
        ds = datasets.load_dataset(builder, data_files={split: str(file)}, split=split)
    except Exception as err:
        detail = _first_bad_json_line(file) if builder == "json" else None
        raise TasksetError(detail or f"{file}: cannot be read as {builder}: {err}") from err
    return ds, str(file)


def _generated_split(name: str, generator: str, args: dict[str, Any], split: str) -> tuple[Any, str]:
    """One split of a generated taskset as a `datasets.Dataset`, and a label for error messages."""
    import datasets
    from pydantic import ValidationError

    from generators import generate

    try:
        rows = generate(generator, args, split)
    except ValidationError as err:
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise TasksetError(f"taskset '{name}': generator_args: {detail}") from err
    except ValueError as err:
        raise TasksetError(f"taskset '{name}': {err}") from err
    return datasets.Dataset.from_list(rows), f"generator:{generator}[{split}]"


# The tasks of the tasksets read last in this process: every explore step positions a reader on the whole
# training taskset, and reading it again cost 0.2 s (GSM8K) to 0.5 s (arith's 20,000 generated rows) a step.
_READ: dict[tuple[str, tuple[str, ...] | None, tuple], list[Task]] = {}
_READ_KEEP = 4


def load_taskset(config: Source, required_keys: Sequence[str] | None = None) -> list[Task]:
    """`read_taskset`, kept for the next call with the same settings while the files it read are unchanged
    (Tasks are not changed by their users; the list returned is the caller's own)."""
    key = (config.model_dump_json(), tuple(required_keys) if required_keys is not None else None, _source_stamp(config))
    if key not in _READ:
        tasks = read_taskset(config, required_keys)
        while len(_READ) >= _READ_KEEP:
            _READ.pop(next(iter(_READ)))
        _READ[key] = tasks
    return list(_READ[key])


def _source_stamp(config: Source) -> tuple:
    """Size and modification time of a local taskset's files (a generated or hub taskset: none)."""
    if not config.path or generator_name(config.path):
        return ()
    local = resolve_local_path(config.path)
    if local is None:
        return ()
    files = sorted(local.rglob("*")) if local.is_dir() else [local]
    stats = [(f, f.stat()) for f in files if f.is_file()]
    return tuple((str(f), st.st_size, st.st_mtime_ns) for f, st in stats)


def read_taskset(config: Source, required_keys: Sequence[str] | None = None) -> list[Task]:
    """Read every row of a taskset (after split slicing) into `Task`s, validating required keys (a dataset's rows
    too: tasks without rollout settings).

    `required_keys` defaults to the prompt key of the taskset's format; a workflow can add more
    (see `Workflow.required_keys`, e.g. the math workflow also needs the answer key). A row's
    `format.workflow_key` / `format.reward_fn_key` column, when set, overrides the taskset's types.
    """
    import datasets

    if not config.path:
        raise TasksetError(f"taskset '{config.name}': path is not set")
    name = config.name or Path(config.path).stem
    split_spec = config.split or "train"
    fmt = config.format
    keys = list(required_keys) if required_keys is not None else [fmt.prompt_key]
    generator = generator_name(config.path)
    local = None if generator else resolve_local_path(config.path)
    if generator is None and local is None and _looks_local(config.path):
        root = project_root()
        raise TasksetError(
            f"taskset '{name}': path '{config.path}' not found (looked in {Path.cwd()}"
            + (f" and {root}" if root else "")
            + ")"
        )

    try:
        instruction = datasets.ReadInstruction.from_spec(split_spec)
    except Exception as err:
        raise TasksetError(f"taskset '{name}': invalid split '{split_spec}': {err}") from err
    # The split names of a spec like "train[:10]+test[:5]", each loaded once.
    wanted = list(dict.fromkeys(part.split("[")[0].strip() for part in split_spec.split("+")))

    loaded = {
        split: _generated_split(name, generator, dict(config.generator_args or {}), split)
        if generator
        else _load_split(config.path, local, config.subset_name, split)
        for split in wanted
    }
    try:
        absolute = instruction.to_absolute({s: len(ds) for s, (ds, _) in loaded.items()})
    except Exception as err:
        raise TasksetError(f"taskset '{name}': invalid split '{split_spec}': {err}") from err

    tasks: list[Task] = []
    for part in absolute:
        ds, label = loaded[part.splitname]
        for key in keys:
            if key not in ds.column_names:
                raise TasksetError(
                    f"taskset '{name}': key '{key}' not in {label} "
                    f"(columns: {', '.join(ds.column_names)})"
                )
        rows = ds.select(range(part.from_, part.to)) if (part.from_, part.to) != (0, len(ds)) else ds
        for index, row in enumerate(rows, start=part.from_):
            for key in keys:
                if row.get(key) is None:
                    raise TasksetError(
                        f"taskset '{name}': key '{key}' missing in row {index} of {label}"
                        + (f" (line {index + 1})" if label.endswith(".jsonl") else "")
                    )
            tasks.append(_task(config, f"{name}/{part.splitname}/{index}", dict(row), name))
    if not tasks:
        raise TasksetError(f"taskset '{name}': split '{split_spec}' of '{config.path}' is empty")
    return tasks


def _task(config: Source, task_id: str, row: dict[str, Any], name: str) -> Task:
    """A row as a task: with its task set's rollout settings, or, a dataset's row, without any."""
    if not isinstance(config, TasksetConfig):
        return Task(task_id=task_id, raw=row, format=config.format, taskset_name=name)
    fmt = config.format
    return Task(
        task_id=task_id,
        raw=row,
        format=fmt,
        rollout_args=config.rollout_args,
        workflow_args=dict(config.workflow_args or {}),
        reward_fn_args=dict(config.reward_fn_args or {}),
        repeat_times=config.repeat_times,
        workflow_type=(fmt.workflow_key and row.get(fmt.workflow_key)) or config.default_workflow_type,
        reward_fn_type=(fmt.reward_fn_key and row.get(fmt.reward_fn_key)) or config.default_reward_fn_type,
        taskset_name=name,
    )


# --------------------------------------------------------------------------------------------------
# Reading batch by batch
# --------------------------------------------------------------------------------------------------


def compute_total_steps(
    num_tasks: int, batch_size: int, total_epochs: int, total_steps: int | None = None
) -> int:
    """Explore steps of a run: `total_steps` when set, else enough batches to cover total_epochs.

    Batches run on across epoch boundaries (see `TasksetReader`), so every task is used exactly
    `total_epochs` times and only the very last batch may be short.
    """
    if total_steps is not None:
        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        return total_steps
    if num_tasks < 1 or batch_size < 1 or total_epochs < 1:
        raise ValueError(
            f"need num_tasks, batch_size and total_epochs >= 1 "
            f"(got {num_tasks}, {batch_size}, {total_epochs})"
        )
    return math.ceil(num_tasks * total_epochs / batch_size)


class TasksetReader:
    """Hands out batches of tasks, epoch after epoch, from a position that can be saved and restored.

    The position is (epoch, offset): how many tasks of the current epoch were handed out. Which tasks a batch
    holds is the selector's (the taskset's `task_selector`, buffer/selectors.py): a function of the position
    and the seed, and for difficulty_based of what it learnt (its state, buffer/selector_state.py), so a restored
    reader continues exactly. A batch that reaches the end of an epoch continues into the next one, keeping
    batches full. `total_epochs=None` reads without end (a run bounded by total_steps instead).
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        batch_size: int,
        total_epochs: int | None = 1,
        *,
        selector: str | TaskSelectorConfig = "sequential",
        seed: int = 42,
    ) -> None:
        from schemas import TaskSelectorConfig

        if not tasks:
            raise ValueError("TasksetReader needs at least one task")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if total_epochs is not None and total_epochs < 1:
            raise ValueError(f"total_epochs must be >= 1 or None, got {total_epochs}")
        if isinstance(selector, str):
            if selector not in SELECTORS:
                raise ValueError(f"unknown task selector '{selector}' (known: {', '.join(SELECTORS)})")
            selector = TaskSelectorConfig.model_validate({"selector_type": selector, "seed": seed})
        self.tasks = list(tasks)
        self.batch_size = batch_size
        self.total_epochs = total_epochs
        self.selector = selector.selector_type
        self.seed = selector.seed
        self.picker = build_selector(self.tasks, selector)
        self.picked: list[int] = []  # the indices this reader handed out (the step's picks, for its metrics)
        self.epoch = 0
        self.offset = 0

    @classmethod
    def for_taskset(
        cls, tasks: Sequence[Task], config: TasksetConfig, batch_size: int, total_epochs: int | None
    ) -> TasksetReader:
        """A reader with the taskset's task_selector."""
        return cls(tasks, batch_size, total_epochs, selector=config.task_selector)

    @property
    def finished(self) -> bool:
        """True once total_epochs have been handed out (never, when total_epochs is None)."""
        return self.total_epochs is not None and self.epoch >= self.total_epochs

    @property
    def consumed(self) -> int:
        """Tasks handed out so far, across epochs."""
        return self.epoch * len(self.tasks) + self.offset

    def _advance(self, count: int) -> None:
        self.epoch, self.offset = divmod(self.consumed + count, len(self.tasks))

    def _next_size(self) -> int:
        if self.finished:
            raise StopIteration
        if self.total_epochs is None:
            return self.batch_size
        return min(self.batch_size, self.total_epochs * len(self.tasks) - self.consumed)

    def read(self) -> list[Task]:
        """The next batch (the last one may be short); raises StopIteration when finished."""
        size = self._next_size()
        picks = self.picker.pick(self.consumed, size)
        self.picked += picks
        self._advance(size)
        return [self.tasks[i] for i in picks]

    def skip(self, batches: int) -> None:
        """Move past `batches` batches without picking them (a selector's picks depend only on the position and
        its state, so the batches after are those an uninterrupted reader would hand out)."""
        for _ in range(batches):
            self._advance(self._next_size())

    def __iter__(self) -> Iterator[list[Task]]:
        return self

    def __next__(self) -> list[Task]:
        return self.read()

    def state_dict(self) -> dict[str, Any]:
        """The position, JSON-serialisable; with the same tasks and seed it restores exactly."""
        return {
            "epoch": self.epoch,
            "offset": self.offset,
            "seed": self.seed,
            "selector": self.selector,
            "num_tasks": len(self.tasks),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved position; refuses one saved over a different taskset or order."""
        mine_by_key = {"seed": self.seed, "selector": self.selector, "num_tasks": len(self.tasks)}
        for key, mine in mine_by_key.items():
            if key in state and state[key] != mine:
                raise ValueError(
                    f"taskset position was saved with {key}={state[key]!r} but this reader has "
                    f"{key}={mine!r}: the taskset or its order changed since the checkpoint"
                )
        epoch, offset = int(state["epoch"]), int(state["offset"])
        if epoch < 0 or not 0 <= offset < len(self.tasks):
            raise ValueError(f"invalid taskset position epoch={epoch}, offset={offset}")
        self.epoch, self.offset = epoch, offset
