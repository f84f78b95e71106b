"""MLflow writes survive an outage: while the server does not answer they are kept in the experiment's
spool file, quickly (one bounded wait, then straight to the spool), and nothing fails. (Their replay
once the server is back runs in tests/test_self_healing.py, against a real server.)"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import tracking
from deployments import load_recipe


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
