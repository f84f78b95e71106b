"""`rft watch` as a person sees it: a short staged run (an SFT warm-up evaluated before and after, then GRPO) on
a real Prefect server, the view in a 160×50 tmux pane captured every 2 s. The screen shows progress within 30 s of
the start, keeps moving during an evaluation, never shows Prefect's raw event stream, and ends on the final state.
(scripts/up.sh follows a deployment's run with the same command; docs/nightly-watch.txt holds frames of one.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.staged import sft_then_smoke
from tests.test_deployment import free_port, stop_all

pytestmark = [pytest.mark.slow, pytest.mark.full]
ROOT = Path(__file__).resolve().parent.parent
PREFECT = str(Path(sys.executable).parent / "prefect")
SESSION = "rft-watch-test"


def staged(root: Path) -> dict:
    """An SFT warm-up (2 steps, evaluated before and after), then 3 GRPO steps of smoke: minutes on 2 cores."""
    rows = root / "sft.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"What is {i} + 3?", "response": f"{i + 3}"}) + "\n" for i in range(8)))
    return sft_then_smoke(rows, root, "grpo", name="watch-live", **{"buffer.total_steps": 3}).user_data()


def run_id(env: dict[str, str], name: str) -> str:
    """The id of the flow run named `name` once the server has it ('' until then)."""
    code = ("from prefect.client.orchestration import get_client\n"
            "from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName\n"
            "with get_client(sync_client=True) as c:\n"
            f"    runs = c.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[{name!r}])))\n"
            "    print(runs[0].id if runs else '')\n")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60).stdout.strip()


def pane() -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", SESSION], capture_output=True, text=True).stdout.rstrip()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_live_view_moves_from_the_start_and_through_evaluations(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
           "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env,
                              stdout=open(tmp_path / "server.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    procs = [server]
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        (tmp_path / "config.json").write_text(json.dumps(staged(tmp_path)))
        launch = ("import json, sys\nfrom schemas import ExperimentConfig\nfrom flows.rft import rft\n"
                  "rft.with_options(flow_run_name='watch-live')(config=ExperimentConfig.model_validate(json.load(open(sys.argv[1]))))")
        flow = subprocess.Popen([sys.executable, "-c", launch, str(tmp_path / "config.json")], cwd=ROOT, env=env,
                                stdout=open(tmp_path / "flow.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(flow)
        flow_run = ""
        while not flow_run and flow.poll() is None:
            flow_run = run_id(env, "watch-live")
        assert flow_run, (tmp_path / "flow.log").read_text()[-3000:]
        watch = f"{sys.executable} -m cli.main watch {flow_run}; echo exit $?; sleep 120"
        subprocess.run(["tmux", "new", "-d", "-s", SESSION, "-x", "160", "-y", "50", "-c", str(ROOT),
                        *[arg for k in ("PREFECT_API_URL", "PREFECT_HOME", "PYTHONPATH") for arg in ("-e", f"{k}={env[k]}")],
                        "-e", "COLUMNS=160", "-e", "LINES=50",  # as wide as the pane, whatever the test's own environment says
                        watch], check=True)
        started, frames = time.monotonic(), []
        while flow.poll() is None and time.monotonic() - started < 1200:
            frames.append((time.monotonic() - started, pane()))
            time.sleep(2)
        time.sleep(6)
        frames.append((time.monotonic() - started, pane()))
        (tmp_path / "frames.txt").write_text("\n".join(f"=== t+{t:.0f} s ===\n{f}" for t, f in frames))
    finally:
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
        stop_all([p for p in procs[::-1] if p.poll() is None])
    assert flow.returncode == 0, (tmp_path / "flow.log").read_text()[-3000:]
    # within 30 s: the view (its table and what runs now), not Prefect's events
    assert any(t <= 30 and "held-out before" in f and "now:" in f for t, f in frames), frames[:10]
    assert not any("prefect.task-run" in f or "prefect.flow-run" in f for _, f in frames)
    # an evaluation runs for several frames, and the screen moves while it does (its running time counts up)
    evaluating = [f for _, f in frames if "evaluate (" in f]
    assert len(set(evaluating)) >= 2, evaluating
    # steps show up as they happen, and the end is the final state
    assert any("grpo" in f and "1/3" in f for _, f in frames)
    last = frames[-1][1]
    assert "COMPLETED" in last and "2/2" in last and "3/3" in last and "exit 0" in last, last
