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
    rows = [{"model": f"{m.__module__}.{m.__qualname__}", "field": f, "by": "flows/rft.py"} for _, m, f in settings_reads.places()
            if not (m.__name__ == "MonitorConfig" and f == "experiment_name")]
    (tmp_path / "reads-1.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert settings_reads.unread(tmp_path) == ["monitor.experiment_name"]
    assert settings_reads.main([str(tmp_path)]) == 1
    (tmp_path / "reads-2.jsonl").write_text(json.dumps(
        {"model": "schemas.monitor.MonitorConfig", "field": "experiment_name", "by": "tracking/mlflow_monitor.py"}) + "\n")
    assert settings_reads.unread(tmp_path) == [] and settings_reads.main([str(tmp_path)]) == 0
