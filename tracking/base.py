"""What every monitor does, and the monitor that does nothing.

A monitor family (MLflow, TensorBoard, W&B, none) is one subclass of `Monitor`, made for one experiment
config; `tracking.monitor_for` picks it from `monitor.monitor_type`. A run is a dict of strings (it
crosses Prefect tasks and flows): run_id, experiment_id, tracking_uri, url, parent_run_id.

What only MLflow can do (read the metrics back for the curve, register the model, tag checkpoints) has a
default here that does nothing: TensorBoard and W&B draw their own curves, and keep no model registry.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from checkpointing.layout import experiment_dir
from schemas import ExperimentConfig
from schemas.base import STAGE_CHAIN

Run = dict[str, str]


def experiment_root(config: ExperimentConfig) -> tuple[str, Path]:
    """The whole experiment a stage belongs to: its name and folder (a config without stages: itself)."""
    name = config.name
    if str(config.derived.get("name", "")).startswith(STAGE_CHAIN):
        name = name.rsplit("/", 1)[0]
    return name, (Path(config.checkpoint_root_dir) / config.project / name).resolve()


class Monitor(ABC):
    """One experiment's tracking in one monitor family."""

    name: ClassVar[str]  # the monitor.monitor_type it implements

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config

    # -- what every monitor does ------------------------------------------------------------------
    @abstractmethod
    def start(self, flow_run_id: str, role: str) -> Run:
        """The experiment's run of `role` (main, explorer, bench): continued if an earlier attempt left it open."""

    @abstractmethod
    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None: ...

    @abstractmethod
    def log_table(self, run_id: str, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """An evaluation's rows (one per task) at `step`."""

    @abstractmethod
    def finish(self, run_id: str, status: str = "FINISHED") -> None: ...

    @abstractmethod
    def fail_open(self, role: str) -> None:
        """Mark the experiment's open run of `role` failed (a flow that failed before it could finish it)."""

    def markdown(self, run: Run) -> str:
        """Where to look: a line for the Prefect artifact that links the run."""
        return f"{self.name} logs of **{self.config.project}/{self.config.name}**: `{run['url']}`"

    # -- what only some monitors do -----------------------------------------------------------------
    def log_checkpoint(self, run_id: str, step: int, path: str) -> None:
        """A checkpoint written at `step` (MLflow tags the run with its folder)."""

    def curve_rows(self, run_id: str) -> list[dict[str, Any]]:
        """The reward curve's points as table rows (a monitor that cannot read its metrics back: none)."""
        return []

    def log_curve(self, run_id: str, file_name: str) -> Path | None:
        """reward_curve.png, logged with the run (None: the monitor draws its own, or nothing)."""
        return None

    def register_model(self, run_id: str, name: str, model_dir: str) -> str | None:
        """A version of registered model `name` pointing at `model_dir` (None: no registry)."""
        return None

    def tag_remote_model(self, run_id: str, sampler_path: str, state_path: str) -> None:
        """The final weights of a run whose weights stay on a server (Tinker)."""

    def log_comparison(self, name: str, rows: list[dict[str, Any]], curves: dict[str, list[tuple[int, float]]],
                       curve_label: str) -> str | None:
        """An A/B comparison (rft compare): its parent run's id; None: the monitor keeps no comparison."""
        return None

    def promote(self, run_id: str, name: str, metric: str, value: float, heldout: str) -> dict[str, Any] | None:
        """The promotion gate (monitor.gate) on the model registry; None: no registry (validation refuses a gate)."""
        return None

    # -- helpers ------------------------------------------------------------------------------------
    def local_run_id(self, role: str) -> str:
        """The id of a run that lives in this process only: "<monitor>|<role>|<experiment folder>"."""
        return f"{self.name}|{role}|{experiment_dir(self.config)}"


class NoMonitor(Monitor):
    """monitor_type none: logs nothing and creates nothing."""

    name = "none"

    def start(self, flow_run_id: str, role: str) -> Run:
        return {"run_id": self.local_run_id(role), "experiment_id": "", "tracking_uri": self.name, "url": "",
                "parent_run_id": ""}

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        pass

    def log_table(self, run_id: str, name: str, rows: list[dict[str, Any]], step: int) -> None:
        pass

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        pass

    def fail_open(self, role: str) -> None:
        pass

    def markdown(self, run: Run) -> str:
        return f"**{self.config.project}/{self.config.name}** is not tracked (monitor.monitor_type: none)"


class WriterMonitor(Monitor):
    """A monitor whose writer lives in this process (TensorBoard's SummaryWriter, a W&B run): the run id
    names the role and folder, the writer is opened on first use and closed by `finish`."""

    _writers: ClassVar[dict[str, Any]] = {}  # run id -> open writer, for every WriterMonitor of this process
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @abstractmethod
    def open(self, role: str) -> Any:
        """A new writer for the experiment's run of `role`."""

    @abstractmethod
    def close(self, writer: Any, failed: bool) -> None: ...

    @abstractmethod
    def where(self, writer: Any) -> str:
        """The folder the writer logs into."""

    def start(self, flow_run_id: str, role: str) -> Run:
        run_id = self.local_run_id(role)
        return {"run_id": run_id, "experiment_id": "", "tracking_uri": self.name, "url": self.where(self.writer(run_id)),
                "parent_run_id": ""}

    def writer(self, run_id: str) -> Any:
        """The open writer of `run_id`, opened on first use (a run started in another call of this process)."""
        with self._lock:
            if run_id not in self._writers:
                self._writers[run_id] = self.open(run_id.split("|", 2)[1])
            return self._writers[run_id]

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        with self._lock:
            writer = self._writers.pop(run_id, None)
        if writer is not None:
            self.close(writer, failed=status != "FINISHED")

    def fail_open(self, role: str) -> None:
        self.finish(self.local_run_id(role), status="FAILED")
