"""Evaluation metrics (tasks/evaluate.py) from scored experiences, and the before/after tables."""

from __future__ import annotations

import pytest

from buffer.experience import Experience
from tasks.evaluate import comparison_markdown, comparison_rows, comparison_text, eval_metrics, eval_rows


def exp(task: str, *, strict: float, lenient: float, fmt: float, tokens: int = 4, finish: str = "stop",
        accuracy: float | None = None, reward: float | None = None) -> Experience:
    acc = strict if accuracy is None else accuracy
    breakdown = {"accuracy": acc, "format_bonus": 0.1 * fmt, "strict": strict, "lenient": lenient, "format": fmt}
    return Experience(
        eid=f"{task}/{strict}{lenient}{fmt}", task_id=task, group_id=task, prompt_token_ids=[1],
        response_token_ids=[2] * tokens, logprobs=[0.0] * tokens, reward=acc + 0.1 * fmt if reward is None else reward,
        reward_breakdown=breakdown, response_text="x \\boxed{1}", info={"finish_reason": finish, "gold": "1"},
    )


def test_greedy_metrics():
    exps = [
        exp("a", strict=1, lenient=1, fmt=1, tokens=10),
        exp("b", strict=0, lenient=1, fmt=0, tokens=20, finish="length"),  # right, but not boxed
        exp("c", strict=0, lenient=0, fmt=1, tokens=30),  # boxed, wrong
        exp("d", strict=0, lenient=0, fmt=0, tokens=40),
    ]
    m = eval_metrics(exps, tasks=6, failed=1, too_long=1)
    # 6 tasks, one failed and one whose prompt was too long: both wrong, so 1 of 6 strict (not 1 of the 4 answered)
    assert m == pytest.approx({
        "strict": 1 / 6, "lenient": 2 / 6, "format": 2 / 6, "accuracy": 1 / 6, "reward_mean": (1.1 + 0.1) / 4,
        "response_length": 25.0, "truncated": 0.25, "tasks": 6.0, "tasks_failed": 1.0, "tasks_timed_out": 0.0,
        "prompts_too_long": 1.0,
    })


def test_a_task_that_times_out_lowers_every_rate_and_is_counted():
    exps = [exp("a", strict=1, lenient=1, fmt=1), exp("a", strict=1, lenient=1, fmt=1)]  # task a, 2 samples
    m = eval_metrics(exps, repeat_times=2, tasks=2, failed=1, timed_out=1)  # task b timed out on every attempt
    assert (m["strict"], m["mean@2"], m["pass@2"], m["tasks_timed_out"]) == (0.5, 0.5, 0.5, 1.0)


def test_sampled_metrics_mean_and_pass_at_k():
    exps = [exp("a", strict=1, lenient=1, fmt=1), exp("a", strict=0, lenient=0, fmt=1),
            exp("a", strict=1, lenient=1, fmt=1), exp("a", strict=1, lenient=1, fmt=1),
            *[exp("b", strict=0, lenient=1, fmt=0) for _ in range(4)]]
    m = eval_metrics(exps, repeat_times=4)
    assert m["mean@4"] == pytest.approx(0.375) and m["pass@4"] == pytest.approx(0.5)
    assert m["strict"] == pytest.approx(0.375) and m["lenient"] == pytest.approx(0.875) and m["tasks"] == 2.0


def test_a_workflow_without_measures_reports_its_accuracy_as_strict():
    plain = Experience(eid="x", task_id="t", group_id="g", prompt_token_ids=[1], response_token_ids=[2],
                       logprobs=[0.0], reward=1.0, reward_breakdown={"accuracy": 1.0})
    m = eval_metrics([plain])
    assert m["strict"] == 1.0 and "lenient" not in m and "format" not in m
    assert eval_metrics([])["strict"] == 0.0  # every task failed: zeros, not a crash


def test_rows_and_side_by_side_tables():
    rows = eval_rows([exp("a", strict=1, lenient=1, fmt=1), exp("a", strict=0, lenient=1, fmt=1)])
    assert rows == [{"task_id": "a", "strict": 0.5, "lenient": 1.0, "format": 1.0, "accuracy": 0.5,
                     "reward": pytest.approx(0.6), "gold": "1", "response": "x \\boxed{1}"}]
    before = {"strict": 0.02, "format": 0.01, "response_length": 80.0, "tasks": 300.0}
    after = {"strict": 0.85, "format": 0.99, "response_length": 12.5, "tasks": 300.0, "pass@4": 0.9}
    table = comparison_rows(before, after, "after training")
    assert [r["metric"] for r in table] == ["strict", "format", "response_length", "pass@4", "tasks"]
    assert table[0] == {"metric": "strict", "before training": "0.020", "after training": "0.850", "change": "+0.830"}
    assert table[3]["before training"] == "–" and table[4]["change"] == ""
    assert comparison_markdown(before, after).splitlines()[2] == "| strict | 0.020 | 0.850 | +0.830 |"
    text = comparison_text(before, after)
    assert text.splitlines()[0].split() == ["metric", "before", "training", "after", "change"]
    assert "response_length  80.0" in text


def test_rft_eval_builds_the_recipes_evaluation_for_any_model(tmp_path):
    from cli.eval import _has_index, eval_config
    from deployments import load_recipe

    model = tmp_path / "model"
    model.mkdir()
    config = eval_config(load_recipe("gsm8k"), str(model), None, "test[:200]", 4, 1.0, 96)
    (taskset,) = config.buffer.explorer_input.eval_tasksets
    assert (taskset.split, taskset.repeat_times, taskset.rollout_args.temperature) == ("test[:200]", 4, 1.0)
    assert taskset.rollout_args.max_tokens == config.model.max_response_tokens == 96
    assert config.model.model_path == str(model.resolve()) and "-eval-" in config.name  # never a run's engines
    same = eval_config(load_recipe("arith"), "HuggingFaceTB/SmolLM2-135M-Instruct", 0, None, None, None, None)
    assert same.buffer.explorer_input.eval_tasksets == load_recipe("arith").buffer.explorer_input.eval_tasksets
    with pytest.raises(IndexError, match="has 1 eval taskset"):
        eval_config(load_recipe("arith"), str(model), 3, None, None, None, None)
    assert _has_index("arith:0") and not _has_index("arith") and not _has_index("C:recipe.py")


def test_an_evaluation_logs_how_far_it_has_got_at_most_every_interval(monkeypatch):
    """ProgressLog: a line per interval while tasks end, none for the last task (the result's line follows)."""
    import logging

    from tasks import evaluate

    lines: list[str] = []

    class Recorder(logging.LoggerAdapter):
        def __init__(self) -> None:
            super().__init__(logging.getLogger("test"), {})

        def info(self, msg: str, *args: object, **kwargs: object) -> None:
            lines.append(msg % args)

    clock = iter([0.0, 10.0, 31.0, 40.0, 62.0, 95.0])
    monkeypatch.setattr(evaluate, "get_run_logger", Recorder)
    progress = evaluate.ProgressLog("evaluating held-out at step 3", every_s=30.0, clock=lambda: next(clock))
    for done in (1, 2, 3, 4, 5):  # at 10, 31, 40, 62 and 95 s
        progress(done, 5)
    assert lines == ["evaluating held-out at step 3: 2 of 5 tasks, 0.5 min",
                     "evaluating held-out at step 3: 4 of 5 tasks, 1.0 min"]
