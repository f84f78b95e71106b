"""`rft watch FLOW_RUN`: one live view of a deployment's run — per stage the step i/N, the last reward (or
loss), the evaluation before → after, elapsed time and ETA; what runs now (an evaluation, a step), failures
and retries; the UI links. Read from the Prefect API (the run, its nested flow runs) and the experiment
folder (progress.json, eval_at_start.json, summary.json); `--events` prints Prefect's event stream instead.
Piped (`| tee`, a log), where a live display draws only its last frame, it prints a line per change."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from checkpointing import layout
from checkpointing.records import read_json
from cli.progress import failed_note
from tracking.progress import PROGRESS
from tracking.spool import DEAD_LETTER, dead_letter_count

TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


@dataclass
class StageView:
    name: str
    step: int | None = None
    total: int | None = None
    reward: float | None = None
    reward_name: str = "reward"
    failed_share: float = 0.0  # of the last explore step's tasks (explorer.max_failed_task_ratio bounds it)
    before: dict[str, float] = field(default_factory=dict)  # held-out metric per eval taskset, before training
    after: dict[str, float] = field(default_factory=dict)
    elapsed_s: float | None = None
    eta_s: float | None = None
    stopped: str | None = None
    finished: bool = False  # its summary says it ran to the end
    dead_letters: int = 0  # MLflow calls refused on replay, kept in its log/ folder (tracking/spool.py)
    folder: Path | None = None


@dataclass
class RunView:
    name: str
    state: str
    elapsed_s: float
    stages: list[StageView]
    now: str = ""  # what runs now: "evaluate (1m 02s)"
    events: list[str] = field(default_factory=list)  # failures and retries
    links: dict[str, str] = field(default_factory=dict)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def stage_view(name: str, folder: Path, now: float) -> StageView:
    """A stage's numbers from its folder (nothing there yet: an empty row)."""
    view = StageView(name, folder=folder, dead_letters=dead_letter_count(layout.log_dir(folder)))
    progress = read_json(folder / PROGRESS, None)
    if progress:
        view.step, view.total = progress["step"], progress["total"]
        view.reward, view.reward_name = progress.get("reward"), progress.get("reward_name", "reward")
        view.failed_share = progress.get("tasks_failed_share") or 0.0
        view.elapsed_s = now - progress["started"]
        made = view.step - progress.get("started_step", 0)
        if made > 0 and view.step < view.total:
            view.eta_s = (progress["updated"] - progress["started"]) / made * (view.total - view.step)
    view.before = {k: _headline(m) for k, m in read_json(folder / layout.EVAL_AT_START, {}).items()}
    summary = read_json(folder / layout.SUMMARY, {})
    view.after = {k: _headline(m) for k, m in summary.get("eval", {}).items()}
    view.stopped = summary.get("stopped")
    view.finished = bool(summary) and not view.stopped
    if summary and view.step is None:
        view.step = view.total = summary.get("steps")
    if summary and not view.stopped:
        view.eta_s = None
        if progress:
            view.elapsed_s = progress["updated"] - progress["started"]
    return view


def between_flows(stages: list[StageView]) -> str:
    """What the run does while no nested flow runs: a stage starting, between two steps, or closing."""
    begun = [s for s in stages if s.step is not None]
    if not begun:
        return "starting (model, engines, trainer)"
    last = begun[-1]
    if not last.finished and not last.stopped:
        return f"{last.name}: between steps" if last.step < (last.total or 0) else f"{last.name}: saving the final model"
    after = stages[stages.index(last) + 1:]
    return f"starting {after[0].name} (model, engines, trainer)" if after and not last.stopped else "finishing"


def _headline(metrics: dict[str, float]) -> float:
    return metrics.get("strict", metrics.get("accuracy", metrics.get("reward_mean", float("nan"))))


def render(view: RunView) -> RenderableType:
    """The screen: a header, one row per stage, what runs now, events and links."""
    colour = {"COMPLETED": "green", "FAILED": "red", "CRASHED": "red", "CANCELLED": "yellow"}.get(view.state, "cyan")
    header = Text.assemble((f"{view.name}", "bold"), "  ", (view.state, f"bold {colour}"), f"  elapsed {duration(view.elapsed_s)}")
    table = Table(expand=False)
    for column in ("stage", "step", "last reward / loss", "held-out before → after", "elapsed", "ETA"):
        table.add_column(column)
    for s in view.stages:
        step = f"{s.step}/{s.total}" if s.step is not None else "-"
        reward = (f"{s.reward_name} {s.reward:.3f}" if s.reward is not None else "-") + failed_note(s.failed_share)
        evals = ", ".join(f"{k}: {_fmt(s.before.get(k))} → {_fmt(s.after.get(k))}" for k in sorted({*s.before, *s.after})) or "-"
        table.add_row(s.name, step + (" (stopped)" if s.stopped else ""), reward, evals, duration(s.elapsed_s), duration(s.eta_s))
    parts: list[RenderableType] = [header, table]
    for s in view.stages:
        if s.dead_letters and s.folder is not None:
            parts.append(Text(f"{s.name}: MLflow refused {s.dead_letters} kept call(s): "
                              f"{layout.log_dir(s.folder) / DEAD_LETTER}", style="bold yellow"))
    if view.now:
        parts.append(Text(f"now: {view.now}", style="bold"))
    parts += [Text(e, style="red") for e in view.events[-5:]]
    parts += [Text(f"{name}: {url}", style="dim") for name, url in view.links.items()]
    return Group(*parts)


def _fmt(value: float | None) -> str:
    return "…" if value is None else f"{value:.3f}"


# ----------------------------------------------------------------------------- from the Prefect API
def experiment_folders(run: Any) -> list[tuple[str, Path]]:
    """(stage, folder) of the flow run's experiment, from its parameters (as the rft flow names it)."""
    from schemas import ExperimentConfig

    params = run.parameters or {}
    config = ExperimentConfig.model_validate(params["config"]).with_overrides(params.get("overrides") or {})
    if params.get("name_per_flow_run"):
        config = config.for_flow_run(run.name)
    return [(s.name.rsplit("/", 1)[-1] if config.stages else s.name, s.experiment_dir) for s in config.resolve_stages()]


def snapshot(client: Any, flow_run_id: str, folders: list[tuple[str, Path]] | None) -> RunView:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId
    from prefect.client.schemas.sorting import FlowRunSort

    run = client.read_flow_run(flow_run_id)
    now = time.time()
    started = run.start_time.timestamp() if run.start_time else now
    state = run.state.type.value if run.state else "PENDING"
    if run.state and run.state.name.upper() != state:  # BudgetReached, AwaitingRetry: the name says why
        state = f"{state} ({run.state.name})"
    ended = run.end_time.timestamp() if run.end_time and state.split()[0] in TERMINAL else now
    folders = folders if folders is not None else experiment_folders(run)
    view = RunView(name=f"{run.name} ({run.id})", state=state, elapsed_s=ended - started,
                   stages=[stage_view(name, folder, now) for name, folder in folders])
    def nested(parent_id: Any) -> list[Any]:
        return client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])),
            sort=FlowRunSort.START_TIME_DESC, limit=50)

    children = nested(run.id)
    running = [c for c in children if c.state and c.state.type.value == "RUNNING"]
    path: list[str] = []
    while running:  # the innermost running flow: a stage flow's evaluate, explore, train, sync
        child = running[0]
        since = now - child.start_time.timestamp() if child.start_time else 0.0
        path.append(f"{_flow_name(client, child.flow_id)} ({duration(since)})")
        grandchildren = nested(child.id)
        children += grandchildren
        running = [c for c in grandchildren if c.state and c.state.type.value == "RUNNING"]
    active = next((s for s in view.stages if s.step is not None and not s.finished and not s.stopped), None)
    if path and active is not None and not path[0].startswith(f"{active.name} ("):
        path.insert(0, active.name)  # a stage whose steps are not a flow of their own (mode both)
    elif len(path) == 1 and active is None and not any(s.finished or s.stopped for s in view.stages if path[0].startswith(f"{s.name} (")):
        path.append("starting (model, engines, trainer)")  # a stage flow before its first step or evaluation
    if path:
        view.now = " › ".join(path)
    elif state.startswith("RUNNING"):
        view.now = between_flows(view.stages)
    view.events = [f"{_flow_name(client, c.flow_id)}: {c.state.type.value} {c.state.message or ''}".strip()
                   for c in children if c.state and c.state.type.value in ("FAILED", "CRASHED")]
    if run.run_count and run.run_count > 1:
        view.events.append(f"retry: attempt {run.run_count}")
    if state in ("FAILED", "CRASHED") and run.state and run.state.message:
        view.events.append(run.state.message.splitlines()[0])
    ui = os.environ.get("PREFECT_UI_URL")
    if ui:
        view.links["Prefect UI"] = f"{ui.rstrip('/')}/runs/flow-run/{run.id}"
    if mlflow := os.environ.get("RFT_MLFLOW_UI_URL"):
        view.links["MLflow UI"] = mlflow
    return view


_FLOWS: dict[Any, str] = {}


def _flow_name(client: Any, flow_id: Any) -> str:
    if flow_id not in _FLOWS:
        _FLOWS[flow_id] = client.read_flow(flow_id).name
    return _FLOWS[flow_id]


def watch(
    flow_run: Annotated[str, typer.Argument(help="The flow run's id (as `prefect deployment run` prints it).")],
    events: Annotated[bool, typer.Option("--events", help="Prefect's raw event stream instead of the view.")] = False,
    refresh: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 2.0,
) -> None:
    """Follow a flow run of the rft flow (a deployment's) until it ends; exit 1 unless it completed."""
    if events:
        raise typer.Exit(subprocess.call([str(Path(sys.executable).with_name("prefect")), "flow-run", "watch", flow_run]))
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        folders = experiment_folders(client.read_flow_run(flow_run))
        if Console().is_terminal:
            with Live(render(snapshot(client, flow_run, folders)), refresh_per_second=2) as live:
                view = follow(client, flow_run, folders, refresh, lambda v: live.update(render(v)))
        else:  # piped (tee, a log file): a live display draws only its last frame there, so a line per change
            lines: list[str] = []

            def print_changed(v: RunView) -> None:
                line = progress_line(v)
                if not lines or lines[-1] != line:
                    lines.append(line)
                    print(line, flush=True)

            view = follow(client, flow_run, folders, refresh, print_changed)
            Console(width=160).print(render(view))
    raise typer.Exit(0 if view.state.startswith("COMPLETED") else 1)


def follow(client: Any, flow_run: str, folders: list[tuple[str, Path]], refresh: float,
           show: Callable[[RunView], None]) -> RunView:
    """Show the run's view every `refresh` seconds until the run ends; returns the last view."""
    while True:
        view = snapshot(client, flow_run, folders)
        show(view)
        if view.state.split()[0] in TERMINAL:
            return view
        time.sleep(refresh)


def progress_line(view: RunView) -> str:
    """The view in one line (what changes: the state, each stage's step and reward, what runs now; not the clock)."""
    stages = "; ".join(
        f"{s.name} {s.step}/{s.total}" + (f" {s.reward_name} {s.reward:.3f}" if s.reward is not None else "")
        + failed_note(s.failed_share) + (" (stopped)" if s.stopped else "") for s in view.stages if s.step is not None)
    now = re.sub(r" \((\d+h\d{2}m|\d+m\d{2}s)\)", "", view.now)  # the flows, without their running times
    return " | ".join(part for part in (view.state, stages, f"now: {now}" if now else "") if part)
