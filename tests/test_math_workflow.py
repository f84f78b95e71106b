"""math_workflow on real GSM8K rows, the workflow registry and the runner pool.

The engine here is a scripted stand-in implementing `RolloutEngine` (token ids in, token ids out,
through the real SmolLM2 tokenizer) so the workflow logic (prompts, rewards, groups) can be checked
exactly; the real vLLM engine has its own tests.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from backends.rollout import RolloutEngine, Sample, SamplingSettings, TokenIds
from buffer.experience import Experience
from buffer.taskset import Task, load_taskset
from schemas import TaskFormat
from tests.stand_in_engine import StandInEngine
from tests.test_taskset import taskset_config
from workflows import WORKFLOWS, Workflow, get_workflow, register_workflow
from workflows.countdown import evaluate, score_countdown
from workflows.math_workflow import (
    DEFAULT_SYSTEM_PROMPT,
    gold_answer,
    last_boxed,
    math_reward,
    overlong_penalty,
    score_math,
)
from workflows.render import renderer_for
from workflows.runner import AllTasksFailedError, CoalescingEngine, TooManyTasksFailed, WorkflowRunner

RENDERER = renderer_for("HuggingFaceTB/SmolLM2-135M-Instruct")
Responder = Callable[[str, int], str]  # (prompt as text, sample index) -> response text


class ScriptedEngine(StandInEngine):
    """Answers each prompt with text from `respond` (as token ids); records what it was asked."""

    def __init__(self, respond: Responder, version: int = 0) -> None:
        super().__init__(version)
        self.respond = respond
        self.calls: list[tuple[list[TokenIds], SamplingSettings]] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def generate(self, prompts: list[TokenIds], sampling: SamplingSettings) -> list[list[Sample]]:
        with self._lock:
            self.calls.append((prompts, sampling))
            self.threads.add(threading.current_thread().name)
        out = []
        for prompt_ids in prompts:
            prompt_text = RENDERER.tokenizer.decode(prompt_ids)
            samples = []
            for i in range(sampling.n):
                ids = RENDERER.encode(self.respond(prompt_text, i))
                samples.append(Sample(list(prompt_ids), ids, [-0.1] * len(ids), "stop"))
            out.append(samples)
        return out


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return load_taskset(taskset_config(split="train[:400]"))


def gold_of(task: Task) -> str:
    return gold_answer(task.raw["answer"])


def run_math(task: Task, engine: RolloutEngine, repeat_times: int = 1, **kw: Any) -> list[Experience]:
    workflow = get_workflow("math_workflow")(
        task, engine, RENDERER, repeat_times=repeat_times, explore_step=kw.pop("explore_step", 3),
        model_version=kw.pop("model_version", 2), **kw,
    )
    return workflow.run()


# -- reward ----------------------------------------------------------------------------------------


def test_gold_answers_of_real_rows(tasks):
    assert gold_of(tasks[0]) == "72"  # Natalia's clips
    assert gold_of(tasks[345]) == "1080"  # "#### 1,080": commas stripped


def test_correct_boxed_answer_scores_accuracy_plus_format(tasks):
    task = tasks[0]
    engine = ScriptedEngine(lambda chat, i: "48 + 24 = 72 clips.\nThe answer is \\boxed{72}.")
    (exp,) = run_math(task, engine)
    assert exp.reward_breakdown == {"accuracy": 1.0, "format_bonus": 0.1, "strict": 1.0, "lenient": 1.0, "format": 1.0}
    assert exp.reward == pytest.approx(1.1)
    assert exp.info["gold"] == "72"


def test_incorrect_boxed_answer_gets_only_the_format_bonus(tasks):
    (exp,) = run_math(tasks[0], ScriptedEngine(lambda chat, i: "So \\boxed{70}"))
    assert exp.reward_breakdown == {"accuracy": 0.0, "format_bonus": 0.1, "strict": 0.0, "lenient": 0.0, "format": 1.0}
    assert exp.reward == pytest.approx(0.1)


def test_unformatted_answers(tasks):
    correct_plain = ScriptedEngine(lambda chat, i: "She sold 48 + 24 = 72 clips in total.")
    (exp,) = run_math(tasks[0], correct_plain)
    assert exp.reward_breakdown == {"accuracy": 1.0, "format_bonus": 0.0, "strict": 0.0, "lenient": 1.0, "format": 0.0}

    # require_boxed changes what the reward counts, not the measures
    strict = tasks[0].__class__(**{**tasks[0].__dict__, "reward_fn_args": {"require_boxed": True}})
    (exp,) = run_math(strict, correct_plain)
    assert exp.reward == 0.0
    assert exp.reward_breakdown == {"accuracy": 0.0, "format_bonus": 0.0, "strict": 0.0, "lenient": 1.0, "format": 0.0}

    (exp,) = run_math(tasks[0], ScriptedEngine(lambda chat, i: "I do not know."))
    assert exp.reward == 0.0 and exp.reward_breakdown == {
        "accuracy": 0.0, "format_bonus": 0.0, "strict": 0.0, "lenient": 0.0, "format": 0.0}

    truncated = ScriptedEngine(lambda chat, i: "48 + 24 = 72 so \\boxed{7")  # cut off by max_tokens
    (exp,) = run_math(tasks[0], truncated)
    assert exp.reward_breakdown["format"] == 0.0 and exp.reward_breakdown["strict"] == 0.0


def test_thousands_and_equivalent_forms(tasks):
    gold = gold_of(tasks[345])
    assert score_math("\\boxed{1,080}", gold)["accuracy"] == 1.0
    assert score_math("\\boxed{\\$1080.00}", gold)["accuracy"] == 1.0
    assert score_math("\\boxed{1,08}", gold)["accuracy"] == 0.0
    assert last_boxed("a \\boxed{\\frac{1}{2}} b \\boxed{x^{2}}") == "x^{2}"
    custom = score_math("\\boxed{1080}", gold, format_score=0.5)
    assert custom == {"accuracy": 1.0, "format_bonus": 0.5, "strict": 1.0, "lenient": 1.0, "format": 1.0}
    # lenient reads the last number when nothing is boxed; strict needs the box
    assert score_math("so it is 1,080 dollars", gold) == {
        "accuracy": 1.0, "format_bonus": 0.0, "strict": 0.0, "lenient": 1.0, "format": 0.0}
    assert score_math("so it is 1,080 dollars", gold, require_boxed=True)["accuracy"] == 0.0


# -- prompt, sampling and groups -------------------------------------------------------------------


def test_prompt_uses_default_system_prompt_and_question(tasks):
    engine = ScriptedEngine(lambda chat, i: "\\boxed{1}")
    run_math(tasks[1], engine)
    (prompts, _), = engine.calls
    assert prompts == [RENDERER.render([
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": tasks[1].raw["question"]},
    ])]


def test_custom_system_prompt_from_the_taskset_format():
    (task,) = load_taskset(
        taskset_config(split="test[:1]", format={"system_prompt": "Answer tersely."})
    )
    engine = ScriptedEngine(lambda chat, i: "\\boxed{18}")
    (exp,) = run_math(task, engine)
    (prompts, _), = engine.calls
    assert prompts[0] == RENDERER.render(
        [{"role": "system", "content": "Answer tersely."}, {"role": "user", "content": task.raw["question"]}]
    )
    assert exp.reward == pytest.approx(1.1)  # Janet's ducks: 18


def test_system_prompt_from_a_row_column_or_none_at_all(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"question": "1+1?", "answer": "#### 2", "sys": "Be brief."}\n'
        '{"question": [{"role": "user", "content": "2+2?"}], "answer": "#### 4", "sys": null}\n'
    )
    per_row, chat = load_taskset(
        taskset_config(path=str(rows), format={"system_prompt_key": "sys", "system_prompt": ""})
    )
    engine = ScriptedEngine(lambda chat, i: "\\boxed{2}")
    run_math(per_row, engine)
    run_math(chat, engine)
    assert engine.calls[0][0][0] == RENDERER.render([
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"},
    ])
    # "" = no system prompt: the template's own default system turn, if any, and the question
    assert engine.calls[1][0][0] == RENDERER.render([{"role": "user", "content": "2+2?"}])


def test_base_model_prompt_is_trinity_s_plain_text_without_the_chat_template(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "1+1?", "answer": "#### 2", "sys": ""}\n'
                    '{"question": [{"role": "user", "content": "2+2?"}], "answer": "#### 4", "sys": ""}\n')
    boxed, unboxed = load_taskset(taskset_config(path=str(rows), format={"system_prompt": "Box it.",
                                                                          "base_model_prompt": True}))
    engine = ScriptedEngine(lambda text, i: "\\boxed{2}")
    (exp,) = run_math(boxed, engine)
    sent = "System:Box it.\nUser:\n1+1?\nAssistant:\n"  # MathBoxedWorkflow.format_prompt's layout
    assert engine.calls[0][0] == [RENDERER.tokenizer(sent)["input_ids"]]  # as Trinity's generate tokenizes it
    assert RENDERER.tokenizer.decode(exp.prompt_token_ids) == sent and "<|im_start|>" not in sent
    assert exp.prompt_text == sent and exp.reward == pytest.approx(1.1)
    with pytest.raises(ValueError, match="base_model_prompt writes the prompt_key column 'question' as plain text"):
        run_math(unboxed, engine)  # a chat in the column: no plain-text layout for it
    (none,) = load_taskset(taskset_config(path=str(rows), split="train[:1]",
                                          format={"system_prompt_key": "sys", "base_model_prompt": True}))
    run_math(none, engine)  # "" = no system prompt: from "User:", as Trinity writes it
    assert RENDERER.tokenizer.decode(engine.calls[-1][0][0]) == "User:\n1+1?\nAssistant:\n"


def test_group_of_repeat_times_samples(tasks):
    answers = ["\\boxed{72}", "\\boxed{71}", "72", "no idea"]
    engine = ScriptedEngine(lambda chat, i: answers[i])
    exps = run_math(tasks[0], engine, repeat_times=4, explore_step=5, model_version=7, max_tokens=64)
    (_, sampling), = engine.calls
    assert sampling.n == 4 and sampling.max_tokens == 64
    assert [e.reward for e in exps] == pytest.approx([1.1, 0.1, 1.0, 0.0])
    assert len({e.group_id for e in exps}) == 1
    assert len({e.eid for e in exps}) == 4
    assert all(e.task_id == "gsm8k/train/0" for e in exps)
    assert all(e.model_version == 7 and e.explore_step == 5 for e in exps)
    assert all(len(e.logprobs) == len(e.response_token_ids) == len(e.response_mask) for e in exps)
    assert exps[0].response_text == "\\boxed{72}" and exps[0].prompt_text == tasks[0].raw["question"]

    again = run_math(tasks[0], engine, repeat_times=4, explore_step=5)
    assert again[0].group_id != exps[0].group_id  # same task twice in one step: two groups


def test_missing_gold_answer_names_the_task(tasks):
    task = Task(**{**tasks[0].__dict__, "raw": {"question": "q"}, "task_id": "mini/train/9"})
    with pytest.raises(KeyError, match="task mini/train/9: response_key 'answer'"):
        run_math(task, ScriptedEngine(lambda chat, i: "x"))


# -- registry --------------------------------------------------------------------------------------


def test_unknown_workflow_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown workflow type 'nope' \(known: .*math_workflow"):
        get_workflow("nope")


def test_a_new_workflow_is_one_small_class(tasks):
    @register_workflow("echo_length_test")
    class EchoLength(Workflow):
        def run(self) -> list[Experience]:
            samples = self.sample([{"role": "user", "content": "hi"}])
            return [self.make_experience(s, i, reward=len(s.text)) for i, s in enumerate(samples)]

    try:
        exps = get_workflow("echo_length_test")(
            tasks[0], ScriptedEngine(lambda chat, i: "abc"), RENDERER, repeat_times=2, explore_step=0,
            model_version=0,
        ).run()
        assert [e.reward for e in exps] == [3.0, 3.0]
        with pytest.raises(ValueError, match="already registered"):
            register_workflow("echo_length_test")(type("Other", (EchoLength,), {}))
    finally:
        WORKFLOWS.pop("echo_length_test")


# -- runner pool -----------------------------------------------------------------------------------


def answer_correctly(prompt: str, i: int) -> str:
    question = next(q for q in GOLD_BY_QUESTION if q in prompt)
    return f"\\boxed{{{GOLD_BY_QUESTION[question]}}}"


GOLD_BY_QUESTION: dict[str, str] = {}


def test_runner_spreads_tasks_over_engines_and_keeps_task_order(tasks):
    batch = tasks[:12]
    GOLD_BY_QUESTION.update({t.raw["question"]: gold_of(t) for t in batch})
    engines = [ScriptedEngine(answer_correctly, version=4), ScriptedEngine(answer_correctly, version=4)]
    result = WorkflowRunner(engines, RENDERER, runner_per_model=2).run(
        batch, explore_step=1, repeat_times=3
    )
    assert not result.failures
    assert [e.task_id for e in result.experiences] == [t.task_id for t in batch for _ in range(3)]
    assert all(e.reward == pytest.approx(1.1) and e.model_version == 4 for e in result.experiences)
    assert all(engine.calls for engine in engines)  # both engines took work
    stats = result.stats
    assert stats["tasks"] == 12 and stats["experiences"] == 36 and stats["tasks_failed"] == 0
    assert stats["reward_mean"] == pytest.approx(1.1)


def test_a_failing_task_is_reported_and_skipped(tasks):
    broken = Task(**{**tasks[1].__dict__, "raw": {"question": tasks[1].raw["question"]}})
    batch = [tasks[0], broken, tasks[2]]
    engine = ScriptedEngine(lambda chat, i: "\\boxed{0}")
    result = WorkflowRunner([engine], RENDERER, runner_per_model=2).run(batch, explore_step=0, repeat_times=2)
    assert [f.task_id for f in result.failures] == ["gsm8k/train/1"]
    assert "KeyError" in result.failures[0].error
    assert [e.task_id for e in result.experiences] == ["gsm8k/train/0"] * 2 + ["gsm8k/train/2"] * 2


def test_more_failed_tasks_than_the_bound_fail_the_step_naming_the_first(tasks):
    """explorer.max_failed_task_ratio: a reward or data bug that fails most tasks stops the step (not retried), where
    it used to train on the few left with a warning; at the bound the step trains on the rest."""
    from backends.errors import is_transient

    broken = [Task(**{**t.__dict__, "raw": {"question": t.raw["question"]}}) for t in tasks[1:4]]
    result = WorkflowRunner([ScriptedEngine(lambda chat, i: "\\boxed{0}")], RENDERER, runner_per_model=2).run(
        [tasks[0], *broken], explore_step=3, repeat_times=1)
    assert result.failed_share == 0.75
    with pytest.raises(TooManyTasksFailed, match=r"explore step 3: 3 of 4 tasks failed \(75%, more than "
                                                 r"explorer.max_failed_task_ratio 0.5\); the first, gsm8k/train/1: KeyError"):
        result.check_failed_share(0.5, "explore step 3")
    result.check_failed_share(0.75, "explore step 3")  # at the bound: the step trains on the rest
    assert not is_transient(TooManyTasksFailed("x"))


def test_the_runner_counts_every_task_as_it_ends_failed_ones_too(tasks):
    """on_task_done(done, total) after each task, from the runner threads: what an evaluation's progress shows."""
    broken = Task(**{**tasks[1].__dict__, "raw": {"question": tasks[1].raw["question"]}})
    batch = [tasks[0], broken, *tasks[2:5]]
    seen: list[tuple[int, int]] = []
    result = WorkflowRunner([ScriptedEngine(lambda chat, i: "\\boxed{0}")], RENDERER, runner_per_model=3).run(
        batch, explore_step=0, repeat_times=2, on_task_done=lambda done, total: seen.append((done, total)))
    assert len(result.failures) == 1
    assert seen == [(n, 5) for n in range(6)]  # 0 first, then once per task as it ends, the failed one included


def test_all_tasks_failing_is_an_error(tasks):
    def explode(prompt: str, i: int) -> str:
        raise RuntimeError("engine died")

    with pytest.raises(AllTasksFailedError, match=r"all 2 tasks .*gsm8k/train/0: RuntimeError: engine died"):
        WorkflowRunner([ScriptedEngine(explode)], RENDERER).run(tasks[:2], explore_step=0, repeat_times=1)


def test_taskset_repeat_times_overrides_the_algorithm_default(tasks):
    task = Task(**{**tasks[0].__dict__, "repeat_times": 5})
    result = WorkflowRunner([ScriptedEngine(lambda c, i: "x")], RENDERER).run(
        [task, tasks[1]], explore_step=0, repeat_times=2
    )
    assert [e.task_id for e in result.experiences].count(task.task_id) == 5
    assert [e.task_id for e in result.experiences].count(tasks[1].task_id) == 2


def test_concurrent_generate_calls_are_merged_while_the_engine_is_busy():
    gate = threading.Event()

    def respond(prompt: str, i: int) -> str:
        gate.wait(timeout=30)  # the engine stays busy with the first call until the gate opens
        return f"echo {prompt}"

    engine = ScriptedEngine(respond)  # records each call before answering it
    results: dict[str, list[list[Sample]]] = {}

    def ask(coalescer: CoalescingEngine, text: str) -> None:
        results[text] = coalescer.generate([RENDERER.encode(text)], SamplingSettings(n=2))

    with CoalescingEngine(engine) as coalescer:
        first = threading.Thread(target=ask, args=(coalescer, "a"))
        first.start()
        while not engine.calls:  # "a" is in the engine, which is now busy
            threading.Event().wait(0.01)
        others = [threading.Thread(target=ask, args=(coalescer, t)) for t in "bcd"]
        for t in others:
            t.start()
        while coalescer._requests.qsize() < 3 and not gate.wait(0.01):
            pass
        gate.set()
        for t in [first, *others]:
            t.join(timeout=30)

    asked = [[RENDERER.decode(ids) for ids in prompts] for prompts, _ in engine.calls]
    # b, c and d waited together: one engine call (threads reach the queue in any order)
    assert [sorted(prompts) for prompts in asked] == [["a"], ["b", "c", "d"]]
    assert coalescer.calls == 2
    for text in "abcd":
        (samples,) = results[text]
        assert [RENDERER.decode(s.response_token_ids) for s in samples] == [f"echo {text}"] * 2


# ---------------------------------------------------------------- explorer.max_retry_times / max_timeout / prompts


def test_a_failing_task_is_tried_again_up_to_max_retry_times(tasks):
    calls: dict[str, int] = {}

    def flaky(prompt: str, i: int) -> str:  # the first two attempts of every prompt fail
        calls[prompt] = calls.get(prompt, 0) + (i == 0)
        if calls[prompt] <= 2:
            raise RuntimeError("transient")
        return "\\boxed{1}"

    batch = tasks[:2]
    result = WorkflowRunner([ScriptedEngine(flaky)], RENDERER, coalesce=False).run(
        batch, explore_step=1, repeat_times=2, max_retry_times=2)
    assert not result.failures and len(result.experiences) == 4 and result.stats["task_retries"] == 4
    calls.clear()
    with pytest.raises(AllTasksFailedError, match="transient"):  # one retry is not enough: each is reported failed
        WorkflowRunner([ScriptedEngine(flaky)], RENDERER, coalesce=False).run(
            batch, explore_step=1, repeat_times=2, max_retry_times=1)


def test_a_task_running_past_max_timeout_is_given_up_and_tried_again(tasks):
    slow_once = threading.Event()

    def respond(prompt: str, i: int) -> str:
        if not slow_once.is_set():
            slow_once.set()
            threading.Event().wait(5)  # the first attempt hangs past the timeout
        return "\\boxed{2}"

    started = time.perf_counter()
    # not coalesced: a hung call would keep a shared engine busy for the retry too (as a real engine would)
    result = WorkflowRunner([ScriptedEngine(respond)], RENDERER, coalesce=False).run(
        tasks[:1], explore_step=1, repeat_times=1, max_retry_times=1, max_timeout=0.5)
    assert time.perf_counter() - started < 4  # did not wait for the hung attempt
    assert not result.failures and len(result.experiences) == 1
    assert result.stats["task_timeouts"] == 1 and result.stats["task_retries"] == 1
    with pytest.raises(AllTasksFailedError, match=r"TaskTimeoutError: ran longer than 0.2 s \(explorer.max_timeout\)"):
        WorkflowRunner([ScriptedEngine(lambda p, i: threading.Event().wait(3) and "")], RENDERER).run(
            tasks[:1], explore_step=1, repeat_times=1, max_retry_times=0, max_timeout=0.2)


def test_prompts_over_max_prompt_tokens_are_skipped_and_counted_never_failing_the_batch(tasks):
    engine = ScriptedEngine(lambda p, i: "\\boxed{3}")
    lengths = [len(RENDERER.render(get_workflow("math_workflow")(t, engine, RENDERER, repeat_times=1, explore_step=1,
                                                                  model_version=0).messages())) for t in tasks[:4]]
    limit = sorted(lengths)[1]  # the two shortest pass
    result = WorkflowRunner([engine], RENDERER).run(tasks[:4], explore_step=1, repeat_times=2, max_prompt_tokens=limit,
                                                    max_retry_times=2)
    kept = [t.task_id for t, n in zip(tasks[:4], lengths) if n <= limit]
    assert sorted({e.task_id for e in result.experiences}) == sorted(kept)
    assert result.stats["prompts_too_long"] == 4 - len(kept) and result.stats["task_retries"] == 0
    assert not result.failures and "exceeds model.max_prompt_tokens" in result.too_long[0].error
    everything = WorkflowRunner([engine], RENDERER).run(tasks[:2], explore_step=1, repeat_times=1, max_prompt_tokens=5)
    assert everything.experiences == [] and everything.stats["prompts_too_long"] == 2  # skipped, not an error


def test_min_tokens_reach_the_engine(tasks):
    engine = ScriptedEngine(lambda p, i: "\\boxed{4}")
    WorkflowRunner([engine], RENDERER).run(tasks[:1], explore_step=1, repeat_times=1, min_tokens=7)
    assert engine.calls[0][1].min_tokens == 7


# -- Trinity's reward functions ----------------------------------------------------------------------


def with_reward(task: Task, name: str, **args: Any) -> Task:
    return task.__class__(**{**task.__dict__, "reward_fn_type": name, "reward_fn_args": args})


def test_overlong_penalty_is_dapos_soft_punishment():
    # max 100 tokens, the last 20 of them the cache: 0 up to 80, then linear to -factor at 100, -factor beyond
    assert [overlong_penalty(n, 100, 20, 0.5) for n in (10, 80, 90, 100, 101)] == pytest.approx(
        [0.0, 0.0, -0.25, -0.5, -0.5])


def test_math_dapo_reward_scores_the_boxed_answer_and_penalises_overlong_responses(tasks):
    answers = ["\\boxed{72}", "72", "\\boxed{72}" + " pad" * 40]
    engine = ScriptedEngine(lambda chat, i: answers[i])
    lengths = [len(RENDERER.encode(a)) for a in answers]
    task = with_reward(tasks[0], "math_dapo_reward", enable_overlong_penalty=True, penalty_factor=1.0, cache_length=30)
    exps = run_math(task, engine, repeat_times=3, max_tokens=lengths[2])  # max_response_length: the rollout's
    assert [e.reward_breakdown["accuracy"] for e in exps] == [1.0, 0.0, 1.0]  # an unboxed answer scores nothing
    assert all(e.reward_breakdown["format_bonus"] == 0.0 for e in exps)
    assert exps[0].reward == 1.0 and exps[1].reward == 0.0
    assert exps[2].reward_breakdown["overlong_penalty"] == -1.0 and exps[2].reward == 0.0  # at the maximum length
    off = run_math(with_reward(tasks[0], "math_dapo_reward"), engine, repeat_times=3, max_tokens=lengths[2])
    assert [e.reward for e in off] == [1.0, 0.0, 1.0] and "overlong_penalty" not in off[2].reward_breakdown


@pytest.mark.parametrize(("response", "reward"), [
    ("<answer>(5 + 3 - 4) * 6</answer>", 1.0),  # 24, each of 3, 4, 5, 6 once
    ("Try 6 * 4 first. <answer>6 * (5 + 3 - 4)</answer>", 1.0),
    ("<answer>6 * (5 - 3) + 4</answer>", 0.1),  # the numbers are right, the value (16) is not
    ("<answer>6 * 4 * (5 - 3) / 2</answer>", 0.1),  # 2 is not given, 3... is
    ("<answer>(5 - 3) * 6 * 4 / 4</answer>", 0.1),  # 4 twice
    ("<answer>(5 + 3 - 4) * 6</answer> or rather <answer>6 * 4</answer>", 0.1),  # the last answer counts
    ("User: <answer>1</answer> Assistant: <answer>(5 + 3 - 4) * 6</answer>", 1.0),  # after an echoed prompt
    ("<answer>__import__('os').getpid()</answer>", 0.1),  # not arithmetic: never evaluated
    ("no answer tags: (5 + 3 - 4) * 6 = 24", 0.0),
])
def test_countdown_reward_is_trinitys_score(response: str, reward: float) -> None:
    breakdown = score_countdown(response, 24.0, [3, 4, 5, 6])
    assert math_reward(breakdown) == reward
    assert breakdown["strict"] == breakdown["lenient"] == (reward == 1.0)
    assert breakdown["format"] == (reward > 0)


def test_countdown_evaluates_arithmetic_only() -> None:
    assert evaluate("(5 + 3 - 4) * 6") == 24 and evaluate("7 / 2") == 3.5 and evaluate("-3 + 4") == 1
    assert evaluate("2 ** 10") is None and evaluate("1 / 0") is None and evaluate("abs(-3)") is None
    assert evaluate("9" * 300) is None  # longer than an equation of a few numbers


def test_math_workflow_scores_countdown_tasks_by_their_json_column() -> None:
    task = Task("countdown/train/0", {"question": "Using [3, 4, 5, 6] make 24.", "answer": '{"target": 24, "numbers": [3, 4, 5, 6]}'},
                format=TaskFormat(prompt_key="question", response_key="answer"), reward_fn_type="countdown_reward")
    engine = ScriptedEngine(lambda chat, i: ["<answer>(5 + 3 - 4) * 6</answer>", "<answer>6 * 4</answer>", "24"][i])
    assert [e.reward for e in run_math(task, engine, repeat_times=3)] == [1.0, 0.1, 0.0]
    broken = Task("countdown/train/1", {"question": "q", "answer": "24"}, format=task.format, reward_fn_type="countdown_reward")
    with pytest.raises(ValueError, match=r"countdown/train/1: countdown_reward reads the 'answer' column as JSON"):
        run_math(broken, engine)


def test_think_penalty_is_trinitys_with_think(tasks):
    """Trinity's math_boxed_workflow with with_think: -format_score_coef unless one <think>...</think>, in order."""
    answers = ["<think> 48 + 24 </think> \\boxed{72}", "\\boxed{72}", "</think> x <think> \\boxed{72}",
               "<think> a </think> <think> b </think> \\boxed{72}", "<think> 48 + 24 </think> \\boxed{70}"]
    engine = ScriptedEngine(lambda chat, i: answers[i])
    task = with_reward(tasks[0], "math_boxed_reward", require_boxed=True, format_score=0.0, think_penalty=0.2)
    exps = run_math(task, engine, repeat_times=5)
    assert [e.reward for e in exps] == pytest.approx([1.0, 0.8, 0.8, 0.8, 0.0])
    assert [e.reward_breakdown["think_penalty"] for e in exps] == [0.0, -0.2, -0.2, -0.2, 0.0]
    assert "think_penalty" not in run_math(with_reward(tasks[0], "math_boxed_reward"), engine)[0].reward_breakdown



def test_step_penalty_takes_the_share_of_wrong_steps_off_the_reward(tasks):
    """reward_fn_args.step_penalty: answers that end alike differ by their worked steps (gold: 72)."""
    answers = ["48 + 24 = 72. \\boxed{72}", "48 + 24 = 70, 70 + 2 = 72. \\boxed{72}", "48 + 24 = 71. \\boxed{71}",
               "\\boxed{72}", "40 + 8 = 48, 48 + 20 = 68. \\boxed{68}"]
    engine = ScriptedEngine(lambda chat, i: answers[i])
    task = with_reward(tasks[0], "math_boxed_reward", require_boxed=True, format_score=0.0, step_penalty=0.5)
    exps = run_math(task, engine, repeat_times=5)
    assert [e.reward_breakdown["step_penalty"] for e in exps] == [0.0, -0.25, -0.5, 0.0, 0.0]
    assert [e.reward for e in exps] == pytest.approx([1.0, 0.75, -0.5, 1.0, 0.0])
    assert "step_penalty" not in run_math(with_reward(tasks[0], "math_boxed_reward"), engine)[0].reward_breakdown
    assert [e.reward_breakdown["wrong_steps"] for e in exps] == [0.0, 0.5, 1.0, 0.0, 0.0]  # explore/wrong_steps


def test_step_token_reward_marks_the_tokens_of_each_result(tasks):
    """reward_fn_args.step_token_reward: per-token process rewards on the results, the answer's reward unchanged."""
    engine = ScriptedEngine(lambda chat, i: ["48 + 24 = 70, 70 + 2 = 72. \\boxed{72}", "\\boxed{72}"][i])
    task = with_reward(tasks[0], "math_boxed_reward", require_boxed=True, format_score=0.0, step_token_reward=0.3)
    marked, plain = run_math(task, engine, repeat_times=2)
    assert (marked.reward, plain.reward) == (1.0, 1.0) and marked.reward_breakdown["wrong_steps"] == 0.5
    assert sorted(set(marked.token_rewards or [])) == [-0.3, 0.0, 0.3] and set(plain.token_rewards or []) == {0.0}
    assert run_math(with_reward(tasks[0], "math_boxed_reward"), engine)[0].token_rewards is None


@pytest.mark.parametrize(("args", "reward_fn", "message"), [
    ({"step_penalty": -0.5}, None, "must be ≥ 0"),
    ({"step_penalty": "much"}, None, "is not a number"),
    ({"step_penalty": 0.5}, "countdown_reward", "countdown_reward scores its one <answer> equation itself"),
])
def test_a_wrong_step_penalty_is_named_before_anything_runs(args, reward_fn, message):
    from pydantic import ValidationError

    from deployments import load_recipe

    with pytest.raises(ValidationError, match=re.escape(message)) as info:
        load_recipe("arith").with_overrides({"buffer.explorer_input.taskset.reward_fn_args": args,
                                             "buffer.explorer_input.taskset.default_reward_fn_type": reward_fn})
    assert "buffer.explorer_input.taskset.reward_fn_args.step_penalty" in str(info.value)

def test_accuracy_reward_gives_no_format_bonus(tasks):
    engine = ScriptedEngine(lambda chat, i: ["\\boxed{72}", "72 clips"][i])
    exps = run_math(with_reward(tasks[0], "accuracy_reward"), engine, repeat_times=2)
    assert [e.reward for e in exps] == [1.0, 1.0]
