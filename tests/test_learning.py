"""A short real run on a tiny task improves held-out reward, watched live with `rft watch` as a person sees it.

The learning check is the one test that catches a silently broken gradient, weight sync or advantage (each
leaves the model where it started, and every other test passes). The task: generated arithmetic, where the
untrained model almost never answers in \\boxed{} (~1 % of its greedy answers); with a format bonus as large as
the answer's, a few GRPO steps teach it. Greedy evaluation of held-out problems before and after, through the
whole stack (Prefect, Ray, vLLM CPU, the torch trainer, weight sync, MLflow). One run, the fewest steps and tokens
that learn reliably.

The same run is watched: it runs on a real Prefect server, `rft watch` follows it in a 160×50 tmux pane captured
every 2 s. The screen shows progress within 30 s of the start, keeps moving during an evaluation, never shows
Prefect's raw event stream, and ends on the final state. (scripts/up.sh follows a deployment's run with the same
command; docs/nightly-watch.txt holds frames of one.) One run for both: each is minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from deployments import load_recipe
from schemas import ExperimentConfig
from tests.test_deployment import free_port, stop_all

pytestmark = [pytest.mark.slow, pytest.mark.full]  # minutes on 2 cores (docs/testing.md): scripts/test.sh --full
ROOT = Path(__file__).resolve().parent.parent
PREFECT = str(Path(sys.executable).parent / "prefect")
SESSION = "rft-learning-watch"
STEPS = 8
HAS_TMUX = shutil.which("tmux") is not None


def learning_config(root: Path) -> ExperimentConfig:
    """arith's GRPO alone, as one stage: the recipe's SFT warm-up would teach the form before the check could."""
    return load_recipe("arith").with_overrides({
        "name": "learning-check",
        "stages": [{"stage_name": "grpo"}],
        "checkpoint_root_dir": str(root / "checkpoints"),
        "buffer.total_steps": STEPS,
        "buffer.batch_size": 2,
        "model.max_response_tokens": 48,
        # plain GRPO at a constant lr (the recipe's DAPO would resample all-zero groups of the untrained model)
        "algorithm.algorithm_type": "grpo",
        "algorithm.optimizer.lr": 1e-4,  # 5e-5 over 6 steps: format 0 -> 0.19 (2026-11-25), short of +0.3
        "algorithm.optimizer.lr_scheduler_type": "constant",
        "algorithm.optimizer.min_lr_ratio": 0.0,
        "algorithm.kl_loss_fn": "none",
        "algorithm.kl_loss_fn_args": {"kl_coef": 0.0},
        "buffer.explorer_input.taskset.generator_args": {"train_size": 5000},  # the problems it was tuned on
        "buffer.explorer_input.taskset.reward_fn_args": {"require_boxed": True, "format_score": 1.0},
        "buffer.explorer_input.eval_tasksets.0.split": "test[:32]",
        "explorer.eval_interval": STEPS,
        "trainer.micro_batch_size": 16,
        "trainer.save_interval": 0,
    })


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


@pytest.fixture(scope="module")
def learning_run(module_tmp_path: Path) -> Iterator[dict]:
    """The run in its own process on a real Prefect server, `rft watch` in tmux beside it (when tmux is there)."""
    root = module_tmp_path
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(root / "prefect"), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
           "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env,
                              stdout=open(root / "server.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    procs = [server]
    config = learning_config(root)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        (root / "config.json").write_text(json.dumps(config.user_data()))
        launch = ("import json, sys\nfrom schemas import ExperimentConfig\nfrom flows.rft import rft\n"
                  "config = ExperimentConfig.model_validate(json.load(open(sys.argv[1])))\n"
                  "outcome = rft.with_options(flow_run_name='learning-check')(config=config)\n"
                  "json.dump(outcome, open(sys.argv[2], 'w'), default=str)")
        flow = subprocess.Popen([sys.executable, "-c", launch, str(root / "config.json"), str(root / "outcome.json")],
                                cwd=ROOT, env=env, stdout=open(root / "flow.log", "w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        procs.append(flow)
        frames: list[tuple[float, str]] = []
        if HAS_TMUX:
            flow_run = ""
            while not flow_run and flow.poll() is None:
                flow_run = run_id(env, "learning-check")
            assert flow_run, (root / "flow.log").read_text()[-3000:]
            watch = f"{sys.executable} -m cli.main watch {flow_run}; echo exit $?; sleep 120"
            subprocess.run(["tmux", "new", "-d", "-s", SESSION, "-x", "160", "-y", "50", "-c", str(ROOT),
                            *[arg for k in ("PREFECT_API_URL", "PREFECT_HOME", "PYTHONPATH") for arg in ("-e", f"{k}={env[k]}")],
                            "-e", "COLUMNS=160", "-e", "LINES=50",  # as wide as the pane, whatever the test's own environment says
                            watch], check=True)
            started = time.monotonic()
            while flow.poll() is None and time.monotonic() - started < 1500:
                frames.append((time.monotonic() - started, pane()))
                time.sleep(2)
            time.sleep(6)
            frames.append((time.monotonic() - started, pane()))
            (root / "frames.txt").write_text("\n".join(f"=== t+{t:.0f} s ===\n{f}" for t, f in frames))
        flow.wait(timeout=1500)
    finally:
        if HAS_TMUX:
            subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
        stop_all([p for p in procs[::-1] if p.poll() is None])
    assert flow.returncode == 0, (root / "flow.log").read_text()[-3000:]
    (stage,) = config.resolve_stages()
    yield {"outcome": json.loads((root / "outcome.json").read_text())[stage.name], "frames": frames}


def test_a_few_grpo_steps_raise_held_out_reward(learning_run: dict) -> None:
    outcome = learning_run["outcome"]
    before, after = outcome["eval_at_start"]["arith-eval"], outcome["eval"]["arith-eval"]
    assert outcome["steps"] == STEPS
    assert before["format"] < 0.2, before  # the untrained model rarely boxes its answer
    assert after["format"] >= before["format"] + 0.3, (before, after)
    assert after["reward_mean"] > before["reward_mean"], (before, after)


@pytest.mark.skipif(not HAS_TMUX, reason="needs tmux")
def test_the_live_view_moves_from_the_start_and_through_evaluations(learning_run: dict) -> None:
    frames = learning_run["frames"]
    # within 30 s: the view (its table and what runs now), not Prefect's events
    assert any(t <= 30 and "held-out before" in f and "now:" in f for t, f in frames), frames[:10]
    assert not any("prefect.task-run" in f or "prefect.flow-run" in f for _, f in frames)
    # an evaluation runs for several frames, and the screen moves while it does (its running time counts up)
    evaluating = [f for _, f in frames if "evaluate (" in f]
    assert len(set(evaluating)) >= 2, evaluating
    # steps show up as they happen, and the end is the final state
    assert any("grpo" in f and f"1/{STEPS}" in f for _, f in frames)
    last = frames[-1][1]
    assert "COMPLETED" in last and f"{STEPS}/{STEPS}" in last and "exit 0" in last, last
