"""What every stage does before and after its loop, in one place: `stage_session` holds the experiment
(one live run per side), brings up the model folder, the tracking run, the engines and the trainer it
needs, resumes from the latest checkpoint and shows progress; at the end it converts and registers the
trained model, draws the curve, writes the summary and releases what it started (also on failure).
Each mode's flow (flows/rl.py, trainer.py, explorer.py, sft_warmup.py, bench.py, serve.py) keeps its loop.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.futures import PrefectFuture, wait
from prefect.runtime import flow_run
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

import tracking
from backends.schedule import Schedule, Side
from buffer.taskset import compute_total_steps, load_taskset
from checkpointing import layout, tinker_state
from checkpointing import lock as run_lock
from checkpointing.layout import experiment_dir
from checkpointing.records import read_json, write_json_atomic
from schemas import ExperimentConfig
from schemas.stage_kind import stage_kind
from tasks.checkpoint import restore_checkpoint, save_checkpoint
from tasks.convert import convert_checkpoint
from tasks.evaluate import comparison_markdown
from tasks.save import link_final_model
from tasks.setup import prepare_model, release, start_rollout_engines, start_trainer
from tasks.tracking import start_mlflow_run
from tracking.progress import StepProgress
from tracking.usage import Ledger


@dataclass
class Stage:
    """What a stage's loop works with; `stage_session` fills it in."""

    config: ExperimentConfig
    total_steps: int
    schedule: Schedule
    model_dir: str = ""
    run: dict[str, str] = field(default_factory=dict)  # the tracking run (none for serve)
    done: int = 0  # train steps restored from the latest checkpoint (0: a fresh start)
    progress: StepProgress | None = None
    evals: list[dict] = field(default_factory=list)  # the loop's last evaluation: the summary's
    summary: dict[str, Any] = field(default_factory=dict)  # what the stage returns, once it closed
    stopped: dict[str, Any] | None = None  # a budget stop: after which step, why, the usage (step, reason, usage)

    @property
    def run_id(self) -> str:
        return self.run["run_id"]

    @property
    def name(self) -> str:
        return f"{self.config.project}/{self.config.name}"


@contextmanager
def stage_session(
    config: ExperimentConfig, total_steps: int, model_name: str | None = None, *, engines: bool | None = None,
    track: bool = True, progress: bool = True,
) -> Iterator[Stage]:
    """Bring the stage up, hand it to the loop, close it. What runs is the schedule's `sides`: the
    engines (unless `engines` is False: a loop that starts them on weights of its own), the trainer
    (restored from the latest checkpoint). A stage that trains closes with the trained model, registered
    as `model_name`, and the summary file; any other with its tracking run finished. On failure what
    was started is released and the error raised (the rft flow's hooks mark the tracking run failed)."""
    schedule = Schedule.of(config)
    stage = Stage(config, total_steps, schedule)
    with exclusive(config, schedule.sides), stage_flows_without_heartbeats():
        try:
            stage.model_dir = prepare_model(config)
            if track:
                stage.run = open_mlflow_run(config, stage_kind(config).tracking_role)
            starting = []
            if schedule.explores and engines is not False:
                starting.append(start_rollout_engines.submit(config, stage.model_dir))
            if schedule.trains:
                starting.append(start_trainer.submit(config, stage.model_dir, total_steps))
            started_together(starting)
            if schedule.trains:
                stage.done = restore_checkpoint(config)  # disk is the source of truth
            if progress:
                stage.progress = StepProgress(total_steps, stage.name, done=stage.done, folder=experiment_dir(config))
            yield stage
            if stage.stopped is not None:  # checkpointed at that step; a later run resumes from it
                stage.summary = stop_stage(config, stage.run, total_steps, **stage.stopped, records=schedule.trains)
            elif schedule.trains and model_name is not None:
                stage.summary = close_stage(config, stage.run, total_steps, stage.model_dir, model_name, stage.evals)
            else:
                stage.summary = close_side(stage)
        except BaseException:
            release_quietly(config, schedule.sides)
            raise
        release(config, schedule.sides)  # the next stage starts its own


def started_together(starting: list[PrefectFuture]) -> None:
    """The engines and the trainer start side by side: each start is mostly one core's work (imports,
    loading the model). Measured on 2 cores (tests/test_kl_penalty_run.py): both ready 18.5 s after the
    model folder, against 24.9 s one after the other. Both are waited for before a failure is raised, so
    the release after it finds everything that was started."""
    wait(starting)
    for future in starting:
        future.result()


def release_quietly(config: ExperimentConfig, sides: tuple[Side, ...]) -> None:
    """Release after a failure: a failing release is logged, the stage's own error is the one raised."""
    try:
        release(config, sides)
    except Exception as err:  # noqa: BLE001
        logging.getLogger(__name__).warning("%s/%s: release after the failure failed too: %s: %s", config.project,
                                            config.name, type(err).__name__, err)


def close_side(stage: Stage) -> dict[str, Any]:
    """A stage that trains no model of its own (explore, bench, serve): its tracking run finished, its
    last evaluation beside the one before training."""
    config = stage.config
    at_start = read_json(experiment_dir(config) / layout.EVAL_AT_START, {})
    if stage.evals:
        create_markdown_artifact(summary_markdown(config, stage.evals, at_start, None, stage.run.get("url")),
                                 description="Final evaluation")
    if stage.run:
        tracking.finish_run(config, stage.run_id)
    return {"steps": stage.total_steps, "mlflow_run_id": stage.run.get("run_id"),
            "eval": {r["name"]: r["metrics"] for r in stage.evals}, "eval_at_start": at_start}


def finished_summary(config: ExperimentConfig, total_steps: int) -> dict[str, Any] | None:
    """The summary of an experiment that already ran to the end (then there is nothing to do)."""
    summary = read_json(experiment_dir(config) / layout.SUMMARY)
    if summary and summary.get("steps") == total_steps:
        get_run_logger().info("%s/%s is already complete: nothing to do", config.project, config.name)
        return summary
    return None


@contextmanager
def exclusive(config: ExperimentConfig, roles: tuple[str, ...] = run_lock.ROLES) -> Iterator[None]:
    """This process is the only one running these sides (explorer, trainer) of the experiment."""
    exp_dir = experiment_dir(config)
    run_lock.hold(exp_dir, owner=f"flow run {flow_run.get_id() or 'local'}", roles=roles)
    try:
        yield
    finally:
        run_lock.release(exp_dir, roles)


@contextmanager
def stage_flows_without_heartbeats() -> Iterator[None]:
    """Stage flows called in here (explore, train, sync, evaluate) send no heartbeats of their own.

    They run in the `rft` run's process, whose heartbeat already tells the server it is alive; and
    Prefect 3.6 waits up to a second for a flow's heartbeat thread to wake before the flow returns:
    1.2 s instead of 0.12 s per nested flow, four of them per step.
    """
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def planned_steps(config: ExperimentConfig) -> int:
    """buffer.total_steps, else total_epochs over the taskset."""
    taskset = config.buffer.explorer_input.taskset
    if config.buffer.total_steps is not None or taskset is None:
        return config.buffer.total_steps or 0
    return compute_total_steps(len(load_taskset(taskset)), config.buffer.batch_size, config.buffer.total_epochs)


def evaluate_and_log(
    config: ExperimentConfig, run_id: str, step: int, only: list[str] | None = None,
) -> tuple[list[dict], dict[str, float]]:
    """Evaluate every eval taskset (those named in `only`, when given); their tables go to MLflow, their
    metrics are returned for the step's."""
    from flows.evaluate import evaluate

    evals = evaluate(config, step, only)
    for result in evals:
        tracking.log_eval_table(config, run_id, result["name"], result["rows"], step)
    return evals, eval_step_metrics({r["name"]: r["metrics"] for r in evals})


def eval_step_metrics(evaluated: dict[str, dict]) -> dict[str, float]:
    """{taskset: metrics} as the step's metric names (eval/{taskset}/{metric})."""
    return {f"eval/{name}/{k}": v for name, values in evaluated.items() for k, v in values.items()}


def evaluate_baseline(config: ExperimentConfig, run_id: str) -> None:
    """The model before training (explorer.eval_on_startup), logged at step 0 and kept for a resumed run.
    What another stage already evaluated on this very model at its end, with the same settings (the next stage
    of a staged run), is not evaluated again: that evaluation is its baseline (minutes per taskset on CPU).
    Only the rest is evaluated, e.g. the held-out pairs a DPO stage adds after a warm-up."""
    from flows.evaluate import evaluated_names

    names = evaluated_names(config)
    if reused := final_evaluation_of(config):
        get_run_logger().info("%s/%s: the model before training is %s, evaluated on %s with these settings at the end of "
                              "its stage: that evaluation is the baseline", config.project, config.name,
                              config.model.model_path, ", ".join(sorted(reused)))
    fresh: dict[str, dict] = {}
    if missing := [name for name in names if name not in reused]:
        results, _ = evaluate_and_log(config, run_id, step=0, only=missing)
        fresh = {r["name"]: r["metrics"] for r in results}
    evaluated = {name: metrics for name in names if (metrics := reused.get(name, fresh.get(name))) is not None}
    tracking.log_metrics(config, run_id, eval_step_metrics(evaluated), 0)
    save_eval_at_start(config, evaluated)


def eval_settings(config: ExperimentConfig) -> dict[str, str]:
    """Per evaluation (by its name), a digest of what its numbers depend on besides the weights: its eval
    taskset (or the held-out pairs), the model's settings (lengths, template) and the engines' (dtype, seed)."""
    common = {
        "model": config.model.model_dump(mode="json", exclude={"model_path"}),
        "rollout_model": config.explorer.rollout_model.model_dump(mode="json"),
    }
    evaluations = {t.name: t.model_dump(mode="json") for t in config.buffer.explorer_input.eval_tasksets}
    if (pairs := config.buffer.trainer_input.eval_pairs) is not None:
        evaluations[pairs.name] = pairs.model_dump(mode="json")
    return {name: hashlib.sha256(json.dumps({"evaluation": item, **common}, sort_keys=True).encode()).hexdigest()
            for name, item in evaluations.items()}


def final_evaluation_of(config: ExperimentConfig) -> dict[str, dict]:
    """{name: metrics} of the evaluations this stage would make that the stage whose final model it starts from
    made at its end with the same settings (each judged on its own); {} when there are none."""
    from flows.evaluate import evaluated_names

    model = Path(config.model.model_path)
    if model.parts[-2:] != ("final", "huggingface"):  # not a stage's final model (a hub name, a folder of one's own)
        return {}
    summary = read_json(model.parent.parent / layout.SUMMARY, {})  # {experiment_dir}/final/huggingface
    evaluated, settings = summary.get("eval") or {}, summary.get("eval_settings")
    same_model = summary.get("final_model") and Path(summary["final_model"]).resolve() == model.resolve()
    if not same_model or not isinstance(settings, dict):  # a summary of before 2026-11-28 held one digest for all
        return {}
    wanted = eval_settings(config)
    return {name: evaluated[name] for name in evaluated_names(config)
            if name in evaluated and settings.get(name) == wanted.get(name)}


def open_mlflow_run(config: ExperimentConfig, role: str = "main") -> dict[str, str]:
    """The run this stage logs to (monitor.monitor_type), linked from a markdown artifact."""
    run = start_mlflow_run(config, str(flow_run.get_id() or "local"), role=role)
    create_markdown_artifact(tracking.run_markdown(config, run), description=f"{config.monitor.monitor_type} run")
    return run


def save_eval_at_start(config: ExperimentConfig, evaluated: dict[str, dict]) -> None:
    """{taskset: metrics} before training, kept for a resumed run and the summary."""
    write_json_atomic(experiment_dir(config) / layout.EVAL_AT_START, evaluated)


def finish_step(
    config: ExperimentConfig, run: dict[str, str], ledger: Ledger, step: int, total_steps: int, model_dir: str,
    metrics: dict[str, float], seconds: float, progress: StepProgress | None, usage: dict[str, float] | None = None,
) -> str | None:
    """What ends every training step, in every flow: its usage counted (`usage`: what the step ran beyond its own
    metrics, e.g. the explorer's tokens), the budget asked, the metrics logged, a checkpoint when due (at once when the
    budget stops the stage), the progress shown. Returns why the stage stops after this step, or None."""
    metrics |= ledger.add(step, metrics | (usage or {}), seconds)
    stop = ledger.stop_reason(config.budget, step, total_steps)
    tracking.log_metrics(config, run["run_id"], metrics, step)
    checkpoint_if_due(config, run, step, total_steps, model_dir, now=stop is not None)
    if progress is not None:
        progress.update(step, metrics)
    return stop


def checkpoint_if_due(
    config: ExperimentConfig, run: dict[str, str], step: int, total_steps: int, model_dir: str, now: bool = False
) -> None:
    """A checkpoint every trainer.save_interval steps, at the end, and `now` (a budget stop); with
    save_hf_checkpoint 'always' each one also becomes a Hugging Face folder at once (the last one is
    converted by close_stage)."""
    interval = config.trainer.save_interval
    if now or step == total_steps or (interval and step % interval == 0):
        path = save_checkpoint(config, step, model_dir)
        tracking.log_checkpoint(config, run["run_id"], step, path)
        if config.trainer.save_hf_checkpoint == "always" and step != total_steps:
            convert_checkpoint(path, model_dir)


def close_stage(
    config: ExperimentConfig, run: dict[str, str], total_steps: int, model_dir: str, model_name: str, evals: list[dict],
) -> dict[str, Any]:
    """Convert the final checkpoint (unless trainer.save_hf_checkpoint is 'never'), point final/ at it,
    register it, draw the curve, write the summary.

    A Tinker checkpoint's weights stay on the Tinker server: final/ points at its record (and the base
    model's config and tokenizer), the MLflow run is tagged with the final weights' tinker:// path, and
    `rft convert` downloads and merges them on request (docs/backends.md, "Tinker")."""
    remote = tinker_state.read(layout.actor_dir(experiment_dir(config), total_steps))
    final_dir = link_final_model(config, total_steps)
    save_hf = config.trainer.save_hf_checkpoint
    if remote is not None:
        tracking.tag_remote_model(config, run["run_id"], remote["sampler_path"], remote["state_path"])
    elif save_hf == "never":  # the trainer checkpoint is the result (`rft convert` makes a Hugging Face folder later)
        final_dir = str(Path(final_dir).parent)
    elif save_hf in ("last", "always"):
        converted = convert_checkpoint(str(layout.step_dir(experiment_dir(config), total_steps)), model_dir)
        tracking.register_model(config, run["run_id"], model_name, converted["model_dir"])
    else:
        raise ValueError(f"trainer.save_hf_checkpoint {save_hf!r}: one of last, always, never")
    curve = tracking.log_reward_curve(config, run["run_id"])
    if points := tracking.curve_rows(config, run["run_id"]):  # the curve's numbers, in the Prefect UI too
        create_table_artifact(points, description=f"{config.project}/{config.name}: training reward, strict and format per "
                              "step; held-out strict / lenient / format at each evaluation (step 0: before training)")
    at_start = read_json(experiment_dir(config) / layout.EVAL_AT_START, {})
    create_markdown_artifact(summary_markdown(config, evals, at_start, final_dir, run["url"]), description="Final evaluation")
    tracking.finish_run(config, run["run_id"])
    summary = {
        "steps": total_steps,
        "final_model": final_dir,
        **({"final_weights": remote["sampler_path"], "final_state": remote["state_path"]} if remote else {}),
        "reward_curve": str(curve) if curve else None,  # MLflow draws it; other monitors their own
        "mlflow_run_id": run["run_id"],
        "mlflow_url": run["url"],
        "eval": {r["name"]: r["metrics"] for r in evals},
        "eval_settings": eval_settings(config),  # a next stage starting from final_model reuses "eval" as its baseline
        "eval_at_start": at_start,
        "usage": Ledger(experiment_dir(config), total_steps).totals(),  # empty where no step counts it
    }
    if refused := tracking.dead_letter_count(layout.log_dir(experiment_dir(config))):  # never dropped silently
        summary["mlflow_dead_letter"] = {"calls": refused,
                                         "file": str(layout.log_dir(experiment_dir(config)) / tracking.DEAD_LETTER)}
    write_json_atomic(experiment_dir(config) / layout.SUMMARY, summary)
    return summary


def stop_stage(config: ExperimentConfig, run: dict[str, str], total_steps: int, step: int, reason: str,
               usage: dict[str, float], records: bool = True) -> dict[str, Any]:
    """A budget stop after `step` (checkpointed): the summary says why, the MLflow run stays open to a resume
    (KILLED, not FINISHED), and the next attempt continues from the checkpoint under its own budget.
    `records`: write the summary file (the trainer's side; an explorer that stopped with it does not)."""
    get_run_logger().warning("%s/%s stopped after step %d/%d: %s", config.project, config.name, step, total_steps, reason)
    create_markdown_artifact(f"# {config.project}/{config.name}: stopped\n\nAfter step {step}/{total_steps}: {reason}. "
                             "Run it again (a larger budget, or none) to continue from this step.", description="Budget stop")
    tracking.finish_run(config, run["run_id"], status="KILLED")
    summary = {"steps": step, "planned_steps": total_steps, "stopped": reason, "usage": usage,
               "mlflow_run_id": run["run_id"], "mlflow_url": run["url"]}
    if records:
        write_json_atomic(experiment_dir(config) / layout.SUMMARY, summary)
    return summary


def summary_markdown(
    config: ExperimentConfig, evals: list[dict], at_start: dict[str, dict], final_dir: str | None, url: str | None
) -> str:
    """The final evaluation: each taskset's metrics before training beside after (tasks/evaluate.py)."""
    lines = [f"# {config.project}/{config.name}", ""]
    lines += [f"Final model: `{final_dir}`", ""] if final_dir else []
    lines += [f"MLflow: [{url}]({url})", ""] if url else []
    for r in evals:
        lines += [f"## {r['name']}", "", comparison_markdown(at_start.get(r["name"]), r["metrics"], "after training"), ""]
    return "\n".join(lines)
