"""`rft watch` (and scripts/up.sh): the view of a run, from the files its stages write."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console

from cli.watch import RunView, render, stage_view


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def screen(view: RunView) -> str:
    console = Console(record=True, width=160)
    console.print(render(view))
    return console.export_text()


def test_a_stage_mid_run_shows_step_reward_evaluation_and_eta(tmp_path: Path) -> None:
    now = time.time()
    write(tmp_path / "warmup" / "eval_at_start.json", {"gsm8k-eval": {"strict": 0.01, "tasks": 400}})
    write(tmp_path / "warmup" / "summary.json", {"steps": 80, "eval": {"gsm8k-eval": {"strict": 0.033}}})
    write(tmp_path / "warmup" / "progress.json", {"step": 80, "total": 80, "started": now - 600, "started_step": 0,
                                                  "updated": now - 100, "reward": 1.25, "reward_name": "loss"})
    write(tmp_path / "grpo" / "eval_at_start.json", {"gsm8k-eval": {"strict": 0.033}})
    # 5 of 20 steps in 100 s since this attempt started at step 0: 15 more take 300 s
    write(tmp_path / "grpo" / "progress.json", {"step": 5, "total": 20, "started": now - 120, "started_step": 0,
                                                "updated": now - 20, "reward": 0.4125, "reward_name": "reward",
                                                "tasks_failed_share": 0.25})
    warmup, grpo = stage_view("warmup", tmp_path / "warmup", now), stage_view("grpo", tmp_path / "grpo", now)
    assert warmup.eta_s is None and round(warmup.elapsed_s) == 500  # done: its own time, not the clock's
    assert round(grpo.eta_s) == 300 and round(grpo.elapsed_s) == 120
    text = screen(RunView("nightly-fox", "RUNNING", 900.0, [warmup, grpo], now="evaluate (1m02s)",
                          links={"Prefect UI": "http://127.0.0.1:4200/runs/flow-run/x"}))
    assert "80/80" in text and "loss 1.250" in text and "gsm8k-eval: 0.010 → 0.033" in text
    assert "5/20" in text and "reward 0.412" in text and "gsm8k-eval: 0.033 → …" in text and "5m00s" in text
    assert "25% of tasks failed" in text and "loss 1.250, " not in text  # a share only where tasks failed
    assert "now: evaluate (1m02s)" in text and "http://127.0.0.1:4200/runs/flow-run/x" in text


def test_a_stage_not_started_and_a_budget_stop(tmp_path: Path) -> None:
    now = time.time()
    assert stage_view("grpo", tmp_path / "nothing", now).step is None
    write(tmp_path / "s" / "summary.json", {"steps": 1, "planned_steps": 3, "stopped": "token budget reached"})
    write(tmp_path / "s" / "progress.json", {"step": 1, "total": 3, "started": now - 60, "started_step": 0,
                                             "updated": now - 30, "reward": 0.1})
    stopped = stage_view("s", tmp_path / "s", now)
    text = screen(RunView("r", "COMPLETED (BudgetReached)", 60.0, [stopped, stage_view("later", tmp_path / "x", now)],
                          events=["retry: attempt 2"]))
    assert "1/3 (stopped)" in text and "BudgetReached" in text and "retry: attempt 2" in text


def test_piped_the_view_is_a_line_per_change_without_the_clock() -> None:
    from cli.watch import StageView, progress_line

    warmup = StageView("sft_warmup", step=80, total=80, reward=1.25, reward_name="loss")
    grpo = StageView("grpo", step=3, total=20, reward=0.4125)
    early = progress_line(RunView("n", "RUNNING", 10.0, [warmup, grpo], now="rft (1m02s) › evaluate (0m05s)"))
    later = progress_line(RunView("n", "RUNNING", 12.0, [warmup, grpo], now="rft (1m04s) › evaluate (0m07s)"))
    assert early == later == "RUNNING | sft_warmup 80/80 loss 1.250; grpo 3/20 reward 0.412 | now: rft › evaluate"
    stopped = StageView("grpo", step=3, total=20, stopped="token budget reached")
    assert progress_line(RunView("n", "COMPLETED (BudgetReached)", 1.0, [stopped])) == "COMPLETED (BudgetReached) | grpo 3/20 (stopped)"


def test_between_flows_the_view_says_which_stage_starts_steps_or_closes() -> None:
    from cli.watch import StageView, between_flows

    warmup, grpo = StageView("sft_warmup", step=80, total=80, finished=True), StageView("grpo")
    assert between_flows([StageView("sft_warmup"), grpo]) == "starting (model, engines, trainer)"
    assert between_flows([StageView("sft_warmup", step=3, total=80), grpo]) == "sft_warmup: between steps"
    assert between_flows([StageView("sft_warmup", step=80, total=80), grpo]) == "sft_warmup: saving the final model"
    assert between_flows([warmup, grpo]) == "starting grpo (model, engines, trainer)"
    assert between_flows([warmup, StageView("grpo", step=20, total=20, finished=True)]) == "finishing"
