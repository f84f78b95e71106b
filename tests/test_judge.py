"""Workflows that talk to an auxiliary model by name (docs/judge.md): `llm_judge_workflow` (an LLM grades each
response) and q20 with `workflow_args.answerer` (a model answers instead of the rules). The grade parser and
the rules; and (slow) one run whose taskset holds both kinds of row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from buffer.experience_store import ExperienceStore
from deployments import load_recipe
from schemas import ExperimentConfig, describe_errors
from workflows.judge import parse_grade

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
JUDGE = {"explorer.auxiliary_models": [{"model_path": SMOL, "name": "judge"}]}


def test_the_grade_is_the_last_boxed_number_clipped_to_ten() -> None:
    assert parse_grade("I think \\boxed{3}, no: \\boxed{ 8 }") == 8.0
    assert parse_grade("\\boxed{12}") == 10.0 and parse_grade("\\boxed{7.5}") == 7.5
    assert parse_grade("a good answer, 9 of 10") is None and parse_grade("") is None


@pytest.mark.parametrize(("workflow", "arg"), [("llm_judge_workflow", "judge"), ("q20", "answerer")])
def test_an_auxiliary_model_named_by_a_workflow_must_exist(workflow: str, arg: str) -> None:
    taskset = {"buffer.explorer_input.taskset.default_workflow_type": workflow,
               "buffer.explorer_input.taskset.workflow_args": {arg: "critic"}}
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({**taskset, **JUDGE})
    assert f"buffer.explorer_input.taskset.workflow_args.{arg}: 'critic' is not an auxiliary model; " \
           "explorer.auxiliary_models: ['judge']" in describe_errors(exc.value)
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides(taskset)
    assert any(line.startswith("explorer.auxiliary_models: buffer.explorer_input.taskset runs") for line in
               describe_errors(exc.value))


def test_the_judge_workflow_needs_a_judge_and_q20_does_not() -> None:
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({"buffer.explorer_input.taskset.default_workflow_type": "llm_judge_workflow"})
    assert any("whose judge is an auxiliary model" in line for line in describe_errors(exc.value))
    load_recipe("q20")  # the rule-based answerer: no auxiliary model


@pytest.mark.slow
@pytest.mark.full  # a whole run with a judge engine, ~3.5 min: scripts/test.sh --full (CI's 90 minutes are full)
def test_a_judge_grades_each_response_and_a_model_answers_q20(tmp_path: Path, tiny_model_path: str) -> None:
    """One run, two kinds of row (format.workflow_key): GSM8K-style questions graded by the judge, and q20 games whose
    questions the same auxiliary model answers (SmolLM2-135M itself: what it grades matters less than that every
    grade is its own reply, parsed). The policy is the tiny model (tests/tiny_model.py): what it answers is graded,
    not judged here."""
    from flows.rft import rft

    rows = [{"workflow": "q20", "question": "dog"}, {"workflow": "llm_judge_workflow", "question": "What is 2 + 3?",
                                                       "answer": "5"},
            {"workflow": "q20", "question": "banana"}, {"workflow": "llm_judge_workflow", "question": "What is 7 - 4?",
                                                          "answer": "3"}]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    taskset = {"name": "both", "path": str(tmp_path / "data"), "split": "train",
               "format": {"prompt_key": "question", "response_key": "answer", "workflow_key": "workflow"},
               "default_workflow_type": "llm_judge_workflow", "rollout_args": {"temperature": 1.0, "max_tokens": 32},
               "workflow_args": {"judge": "judge", "answerer": "judge", "max_turns": 2, "max_tokens_per_turn": 16}}
    config: ExperimentConfig = load_recipe("q20").with_overrides({
        **JUDGE, "name": "judge", "checkpoint_root_dir": str(tmp_path / "ckpt"), "model.model_path": tiny_model_path,
        "algorithm.repeat_times": 2,
        "buffer.batch_size": 2, "buffer.total_steps": 2, "buffer.explorer_input": {"taskset": taskset, "eval_tasksets": []},
        "explorer.eval_on_startup": False, "model.max_response_tokens": 64, "trainer.save_interval": 2,
    })
    assert rft(config=config)[config.name]["steps"] == 2
    with ExperienceStore.for_experiment(config.experiment_dir) as store:
        done = store.experiences()
    graded = [e for e in done if "judge_reply" in e.info]
    games = [e for e in done if "turns" in e.info]
    assert len(graded) == 4 and len(games) == 4, [e.info for e in done]
    for e in graded:
        grade = parse_grade(e.info["judge_reply"])
        assert e.reward == pytest.approx(0.0 if grade is None else grade / 10)
        assert e.reward_breakdown["judge_unparsed"] == float(grade is None)
    text = " ".join(e.response_text for e in games)
    assert "I can only answer yes/no questions about its kind" not in text  # the rules did not answer
    assert any(reply in text for reply in ("Yes.", "No.", "I can only answer yes or no to that.")), text
