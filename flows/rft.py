"""The `rft` flow: an experiment's stages in order, each run by the flow of its mode.

    both     explore, train and sync, in turns or overlapped (flows/rl.py)
    explore  the explorer side alone (flows/explorer.py); a `train` run of the experiment trains
    train    the trainer side alone (flows/trainer.py), or steps on a dataset with algorithm sft or dpo
    bench    evaluate the experiment's saved checkpoints (flows/bench.py)
    serve    the latest weights on the engines' OpenAI endpoints until cancelled (flows/serve.py)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from prefect import flow, get_run_logger
from prefect.context import FlowRunContext
from prefect.states import Completed, State

import tracking
from backends.schedule import Schedule
from flows.bench import bench
from flows.explorer import explore_stage
from flows.gate import gate
from flows.rl import rl
from flows.serve import serve
from flows.sft_warmup import sft_warmup
from flows.trainer import train_stage
from schemas import ExperimentConfig
from schemas.stage_kind import SFT_FLOW, stage_kind
from tasks.failures import report_config_errors_briefly
from tasks.setup import check_requirements, check_secrets, connect, release

StageFlow = Callable[[ExperimentConfig, str], dict[str, Any]]
# The flow of each mode (a stage's model name: what a trained model is registered as). A `train` stage
# of an algorithm that learns from a dataset (sft, dpo) runs the SFT flow: the row is its kind's `flow`
# (schemas/stage_kind.py).
MODE_FLOWS: dict[str, StageFlow] = {
    "both": rl,
    "colocate": rl,  # on CPU: the in-turns plan (validation holds it to sync_offset 0, fixed; schemas/rules.py)
    "train": train_stage,
    SFT_FLOW: sft_warmup,
    "explore": explore_stage,
    "bench": lambda stage, _model_name: bench(stage),
    "serve": lambda stage, _model_name: serve(stage),
}


def _release(flow: Any, flow_run: Any, state: Any) -> None:
    """State hook (completed, failed, crashed, cancelled): engines and trainer never outlive a run. The
    parameters are named as Prefect names them: a worker calls the crashed and cancelled hooks by keyword."""
    params = flow_run.parameters or {}
    try:
        config = ExperimentConfig.model_validate(params["config"]).with_overrides(params.get("overrides") or {})
        if params.get("name_per_flow_run"):
            config = named_for_flow_run(config, flow_run)
    except Exception:  # an invalid config never started anything
        return
    for stage in config.resolve_stages():
        release(stage, Schedule.of(stage).sides)
        if not state.is_completed():
            try:
                tracking.fail_open_run(stage, role=stage_kind(stage).tracking_role)
            except Exception as err:  # noqa: BLE001 - the run's own failure is the message, not the hook's
                logging.getLogger(__name__).warning("MLflow run of %s not marked failed: %s: %s", stage.name,
                                                    type(err).__name__, str(err).splitlines()[0] if str(err) else "")


@flow(
    name="rft",
    on_completion=[_release],
    on_failure=[_release],
    on_crashed=[_release],
    on_cancellation=[_release],
)
def rft(
    config: ExperimentConfig, overrides: dict[str, Any] | None = None, name_per_flow_run: bool = False
) -> dict[str, Any] | State:
    """Run an experiment, or resume it from its latest checkpoint.

    Args:
        config: The whole experiment (Trinity-RFT's sections); a deployment's recipe by default.
        overrides: Single settings by dotted path on top of `config`, e.g.
            {"algorithm.optimizer.lr": 2e-6, "buffer.total_steps": 3}.
        name_per_flow_run: Make every flow run its own experiment, named
            "{name}-{flow run name}" (nightly runs); a retry of that flow run resumes it.

    Returns each stage's summary (and the gate's decision, with `monitor.gate`); a run a budget stopped
    ends Completed, named BudgetReached, with the reason as its message.
    """
    config = config.with_overrides(overrides or {})
    model_name = f"{config.project}-{config.name}"  # registered in MLflow; every run adds a version
    if name_per_flow_run:
        config = named_for_flow_run(config, FlowRunContext.get().flow_run)
    stages = config.resolve_stages()
    report_config_errors_briefly()
    for stage in stages:  # settings without effect: shown before anything starts (and in MLflow's params)
        for warning in stage.warnings:
            get_run_logger().warning("%s/%s: %s", stage.project, stage.name, warning)
    for stage in stages:  # before anything starts or downloads
        check_secrets(stage)
    for stage in stages:  # the pre-flight, before Ray or any engine starts
        check_requirements(stage)
        connect(stage)
    outcome: dict[str, Any] = {}
    for stage in stages:
        name = f"{model_name}-{stage.name.rsplit('/', 1)[-1]}" if len(stages) > 1 else model_name
        outcome[stage.name] = run_stage(stage, name)
        if stopped := outcome[stage.name].get("stopped"):  # a budget: the stages after it wait for a resume
            return Completed(name="BudgetReached", message=f"{stage.name}: {stopped}", data=outcome)
    last = stages[-1]
    if last.monitor.gate is not None and stage_kind(last).trains:
        outcome["gate"] = gate(last, outcome[last.name], last.monitor.gate.registered_model or name)
    return outcome


def run_stage(stage: ExperimentConfig, model_name: str) -> dict[str, Any]:
    """The flow of the stage's mode (modes that cannot run are refused at validation)."""
    return flow_for(stage)(stage, model_name)


def flow_for(stage: ExperimentConfig) -> StageFlow:
    key = stage_kind(stage).flow
    if key not in MODE_FLOWS:
        raise NotImplementedError(f"mode {stage.mode!r} has no flow (validation should have refused it)")
    return MODE_FLOWS[key]


def named_for_flow_run(config: ExperimentConfig, run: Any) -> ExperimentConfig:
    """The experiment of one flow run, named after it: a retry keeps the name (and the date a retry
    is scheduled for may differ from the first attempt's, so it is not part of the name)."""
    return config.for_flow_run(run.name)
