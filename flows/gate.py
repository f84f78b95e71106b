"""The promotion gate after an experiment's last stage (monitor.gate): the new model takes the registry
alias only if its final held-out metric beats the holder's by the margin (tracking/gate.py). The decision
and both numbers are a Prefect artifact and the new model version's description."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact

import tracking
from checkpointing import layout
from checkpointing.records import write_json_atomic
from schemas import ExperimentConfig

FAILS_RUN = {"keep": False, "fail": True}  # monitor.gate.on_loss -> a lost gate fails the run


class GateLost(RuntimeError):
    """monitor.gate.on_loss 'fail': the new model did not beat the holder (a regression gate)."""


def heldout_fingerprint(config: ExperimentConfig, taskset_name: str) -> str:
    """The held-out set and how it is scored and sampled: two runs compare only when this is equal."""
    (taskset,) = [ts for ts in config.buffer.explorer_input.eval_tasksets if ts.name == taskset_name]
    what = {"taskset": taskset.model_dump(mode="json"), "max_response_tokens": config.model.max_response_tokens}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def gate(config: ExperimentConfig, summary: dict[str, Any], model_name: str) -> dict[str, Any]:
    """Decide, record and report; raises GateLost when the model lost and on_loss is 'fail'."""
    settings = config.monitor.gate
    assert settings is not None
    taskset, metric = settings.metric.split("/", 1)
    measured = summary.get("eval", {}).get(taskset, {})
    if metric not in measured:
        raise ValueError(f"monitor.gate.metric {settings.metric!r}: the final evaluation of {taskset!r} has no {metric!r} "
                         f"(it has: {', '.join(sorted(measured)) or 'nothing'})")
    decision = tracking.promote_model(config, summary["mlflow_run_id"], model_name, settings.metric,
                                      float(measured[metric]), heldout_fingerprint(config, taskset))
    assert decision is not None  # validation refuses a gate without a registry
    create_markdown_artifact(decision_markdown(decision), key="promotion-gate", description="Promotion gate")
    write_json_atomic(layout.experiment_dir(config) / layout.GATE, decision)  # for up.sh and rft watch
    get_run_logger().info("promotion gate: version %s %s: %s", decision["version"],
                          "promoted" if decision["promoted"] else "not promoted", decision["reason"])
    if not decision["promoted"] and FAILS_RUN[settings.on_loss]:
        raise GateLost(f"promotion gate: {decision['reason']}")
    return decision


def decision_markdown(d: dict[str, Any]) -> str:
    held = "—" if d["holder_value"] is None else f"{d['holder_value']:.4f}"
    verdict = f"**version {d['version']} takes `{d['alias']}`**" if d["promoted"] else f"`{d['alias']}` stays"
    return "\n".join([
        f"# Promotion gate: {d['model']}", "", verdict, "",
        f"| | version | {d['metric']} |", "|---|---|---|",
        f"| new | {d['version']} | {d['value']:.4f} |",
        f"| holder of `{d['alias']}` | {d['holder_version'] or '—'} | {held} |", "",
        f"Margin {d['margin']}. {d['reason']}.",
    ])
