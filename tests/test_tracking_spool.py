"""MLflow writes survive an outage: while the server does not answer they are kept in the experiment's
spool file, quickly (one bounded wait, then straight to the spool), and nothing fails; a run that ends
while the server is down finishes its parent run when the kept writes are replayed (a real server over
a SQLite store, stopped and started again). The replay in the middle of a run: tests/test_self_healing.py."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import tracking
import tracking.spool
from deployments import load_recipe
from tests.mlflow_server import MlflowServer
from tracking.store import client_for


def test_writes_are_kept_while_the_server_is_down(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    config = load_recipe("smoke").with_overrides(
        {"checkpoint_root_dir": str(tmp_path), "monitor.tracking_uri": f"http://127.0.0.1:{port}"}
    )
    started = time.monotonic()
    tracking.log_metrics(config, "run-1", {"explore/reward_mean": 0.5}, step=1)
    first = time.monotonic() - started
    started = time.monotonic()
    tracking.log_metrics(config, "run-1", {"explore/reward_mean": 0.7}, step=2)
    tracking.log_checkpoint(config, "run-1", 2, "/somewhere/global_step_2")
    later = time.monotonic() - started
    kept = [json.loads(line) for line in (config.experiment_dir / "log" / tracking.SPOOL).read_text().splitlines()]
    assert [k["call"] for k in kept] == ["log_batch", "log_batch", "set_tag", "log_metric"]
    steps = [m["__metric__"][3] for k in kept[:2] for m in k["kwargs"]["metrics"] if m["__metric__"][0] == "explore/reward_mean"]
    assert steps == [1, 2]
    assert first < 30 and later < 1.0, (first, later)  # one bounded wait, then no wait at all


def test_a_run_that_ends_while_the_server_is_down_finishes_its_parent_on_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracking.spool, "PROBE_EVERY_S", 0.0)  # ask the server at once when it is back
    server = MlflowServer(tmp_path)
    server.start()
    try:
        config = load_recipe("smoke").with_overrides(
            {"checkpoint_root_dir": str(tmp_path / "ckpt"), "name": "outage", "monitor.tracking_uri": server.uri}
        )
        run = tracking.start_run(config, "flow-1")
        store = MlflowClient(server.store)  # the SQLite store itself, read while the server is down
        server.stop()
        tracking.log_metrics(config, run["run_id"], {"train/loss": 0.5}, step=1)
        # the run ends while MLflow is down: its curve and the curve's table are skipped, not the end
        assert tracking.log_reward_curve(config, run["run_id"]) is None
        assert tracking.curve_rows(config, run["run_id"]) == []
        tracking.finish_run(config, run["run_id"])
        spool = config.experiment_dir / "log" / tracking.SPOOL
        assert "set_terminated" in [json.loads(line)["call"] for line in spool.read_text().splitlines()]
        assert store.get_run(run["parent_run_id"]).info.status == "RUNNING"

        server.start()
        assert client_for(config).flush() > 0  # the replay (a next run's start does it first)
        assert store.get_run(run["run_id"]).info.status == "FINISHED"
        assert store.get_run(run["parent_run_id"]).info.status == "FINISHED"
        assert [m.value for m in store.get_metric_history(run["run_id"], "train/loss")] == [0.5]
        assert not spool.exists()
    finally:
        server.stop()
