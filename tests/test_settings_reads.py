"""The record of which settings the runtime reads (schemas/read_trace.py) and the check made of it after a whole run
(tests/settings_reads.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests import settings_reads

ROOT = Path(__file__).resolve().parents[1]
# Validates the smoke recipe (the schema's validators read many fields), then asks for the experiment folder the way
# the runtime does (checkpointing/layout.py, through the config's experiment_dir property).
READ_ONE = """
from checkpointing.layout import experiment_dir
from deployments.recipes.smoke import config
config = config.with_overrides({"checkpoint_root_dir": %r})
experiment_dir(config)
"""


def test_a_runtime_read_is_recorded_with_its_module_and_validation_is_not(tmp_path: Path) -> None:
    env = os.environ | {"RFT_TRACE_SETTINGS": str(tmp_path / "reads")}
    subprocess.run([sys.executable, "-c", READ_ONE % str(tmp_path)], cwd=ROOT, env=env, check=True, timeout=300)
    rows = [json.loads(line) for path in (tmp_path / "reads").glob("reads-*.jsonl") for line in path.read_text().splitlines()]
    readers = {(row["field"], row["by"]) for row in rows}
    # checkpoint_root_dir, project and name, read through a settings property the runtime called, count for its module
    assert {("checkpoint_root_dir", "checkpointing/layout.py"), ("project", "checkpointing/layout.py")} <= readers
    # validation read the algorithm, the buffer and every task set; none of it is the runtime's
    assert {row["by"] for row in rows} == {"checkpointing/layout.py"}, readers


def test_off_by_default_nothing_is_recorded(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RFT_TRACE_SETTINGS"}
    code = "import schemas.base as b, schemas.read_trace as t; print(b.Section.__getattribute__ is object.__getattribute__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_a_field_no_run_read_fails_the_check_and_is_named(tmp_path: Path) -> None:
    rows = [{"model": m, "field": f, "by": "flows/rft.py"} for _, m, f in settings_reads.places()
            if not (m.endswith("MonitorConfig") and f == "experiment_name")]
    (tmp_path / "reads-1.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert settings_reads.unread(tmp_path) == ["monitor.experiment_name"]
    assert settings_reads.main([str(tmp_path)]) == 1
    (tmp_path / "reads-2.jsonl").write_text(json.dumps(
        {"model": "schemas.monitor.MonitorConfig", "field": "experiment_name", "by": "tracking/mlflow_monitor.py"}) + "\n")
    assert settings_reads.unread(tmp_path) == [] and settings_reads.main([str(tmp_path)]) == 0


# A loss computed the way a trainer computes it: its arguments read through FunctionArgs, each key by the module that reads it.
READ_ARGUMENTS = """
from algorithms import compute_loss
from algorithms.inputs import LossInputs
import torch
from schemas.algorithm import AlgorithmConfig
alg = AlgorithmConfig(policy_loss_fn="rec", policy_loss_fn_args={"clip_mode": "ring"}, kl_loss_fn="none", entropy_loss_fn="none")
lp = torch.zeros(1, 2, requires_grad=True)
compute_loss(alg, LossInputs(logprobs=lp, old_logprobs=torch.zeros(1, 2), advantages=torch.ones(1, 2),
                             response_mask=torch.ones(1, 2)))
"""


def test_a_functions_arguments_are_recorded_by_the_module_that_reads_each(tmp_path: Path) -> None:
    env = os.environ | {"RFT_TRACE_SETTINGS": str(tmp_path / "reads")}
    subprocess.run([sys.executable, "-c", READ_ARGUMENTS], cwd=ROOT, env=env, check=True, timeout=300)
    rows = [json.loads(line) for path in (tmp_path / "reads").glob("reads-*.jsonl") for line in path.read_text().splitlines()]
    arguments = {(row["field"], row["by"]) for row in rows if row["model"] == "algorithm.*_args"}
    assert {("policy_loss_fn[rec].epsilon_low_prime", "algorithms/policy_loss/rec.py"),
            ("policy_loss_fn[rec].loss_agg_mode", "algorithms/loss.py")} <= arguments


def test_an_argument_no_run_read_fails_the_check_and_functions_sharing_a_model_share_the_evidence(tmp_path: Path) -> None:
    rows = [{"model": m, "field": f, "by": "algorithms/loss.py"} for key, m, f in settings_reads.places()
            if key != "algorithm.policy_loss_fn[rec].temp" and not key.startswith("algorithm.kl_penalty_fn[")]
    # one KL estimator's penalty read: every estimator of the penalty shares its arguments model, and its code
    rows += [{"model": "algorithm.*_args", "field": f"kl_penalty_fn[k3].{arg}", "by": "algorithms/kl_penalty.py"}
             for arg in ("kl_coef", "adaptive", "target_kl", "horizon")]
    (tmp_path / "reads-1.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert settings_reads.unread(tmp_path) == ["algorithm.policy_loss_fn[rec].temp"]
