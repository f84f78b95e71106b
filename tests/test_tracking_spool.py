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


def test_a_kept_call_mlflow_refuses_on_replay_goes_to_the_dead_letter_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept while the server was down, refused when it answers again (the run they name is gone): each such call is
    kept with its error, its artifact beside it, the replay goes on with the rest, and rft watch names the file."""
    from cli.watch import RunView, stage_view
    from tests.test_watch import screen

    monkeypatch.setattr(tracking.spool, "PROBE_EVERY_S", 0.0)
    server = MlflowServer(tmp_path)
    server.start()
    try:
        config = load_recipe("smoke").with_overrides(
            {"checkpoint_root_dir": str(tmp_path / "ckpt"), "name": "refused", "monitor.tracking_uri": server.uri}
        )
        run = tracking.start_run(config, "flow-1")
        server.stop()
        table = tmp_path / "rows.json"
        table.write_text("[]")
        client = client_for(config)
        client.log_metric("no-such-run", "train/loss", 0.1, step=1)  # a run that will not exist
        client.log_artifact("no-such-run", str(table), "tables")
        tracking.log_metrics(config, run["run_id"], {"train/loss": 0.5}, step=1)  # a good one after them
        server.start()
        assert client.flush() == 3
        log = config.experiment_dir / "log"
        dead = [json.loads(line) for line in (log / tracking.DEAD_LETTER).read_text().splitlines()]
        assert [d["call"] for d in dead] == ["log_metric", "log_artifact"] and all(d["error"] for d in dead)
        assert Path(dead[1]["args"][1]).read_text() == "[]" and "mlflow_dead_letter" in dead[1]["args"][1]
        assert [m.value for m in MlflowClient(server.store).get_metric_history(run["run_id"], "train/loss")] == [0.5]
        assert tracking.dead_letter_count(log) == 2
        text = screen(RunView("refused", "RUNNING", 1.0, [stage_view("grpo", config.experiment_dir, time.time())]))
        assert "MLflow refused 2 kept call(s)" in text and tracking.DEAD_LETTER in text
    finally:
        server.stop()
