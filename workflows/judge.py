"""`llm_judge_workflow`: an auxiliary model grades each response (LLM-as-judge reward).

The policy answers the row's prompt (format.prompt_key, with the system prompt as math_workflow's); the judge
(an auxiliary model, `workflow_args.judge`, default the first of `explorer.auxiliary_models`) reads the
question, the reference answer when the row has one (format.response_key) and the response, and gives a grade
from 0 to 10 in \\boxed{} (greedy, its own chat template). Reward = grade / 10; a reply without a grade scores 0
and counts as `judge_unparsed`. `accuracy` is 1 when the grade reaches `pass_grade`.

workflow_args: judge (name), pass_grade (default 7), max_judge_tokens (default 64), judge_prompt (the grading
instruction, with {question}, {reference} and {response} in it; default JUDGE_PROMPT).
"""

from __future__ import annotations

import re
from typing import Any

from backends.rollout import SamplingSettings
from buffer.experience import Experience
from workflows.auxiliary import pick
from workflows.base import register_workflow
from workflows.math_workflow import MathWorkflow

JUDGE_PROMPT = (
    "Grade the response to the question from 0 (wrong) to 10 (right and clear).\n\n"
    "Question: {question}\n\nReference answer: {reference}\n\nResponse: {response}\n\n"
    "Give only the grade, a whole number, in \\boxed{{}}, e.g. \\boxed{{7}}."
)
DEFAULT_PASS_GRADE = 7
DEFAULT_MAX_JUDGE_TOKENS = 64
_GRADE = re.compile(r"\\boxed\{\s*(\d+(?:\.\d+)?)\s*\}")


def parse_grade(reply: str) -> float | None:
    """The last \\boxed{N} of the judge's reply, clipped to 0..10; None when there is none."""
    found = _GRADE.findall(reply)
    return None if not found else min(max(float(found[-1]), 0.0), 10.0)


@register_workflow("llm_judge_workflow")
class JudgeWorkflow(MathWorkflow):
    """Sample `repeat_times` responses to math_workflow's prompt; the judge grades each (no gold answer needed)."""

    @classmethod
    def required_keys(cls, fmt: Any) -> list[str]:
        return [fmt.prompt_key]

    def run(self) -> list[Experience]:
        args = self.task.workflow_args or {}
        judge = pick(self.auxiliary, args.get("judge"), "llm_judge_workflow (workflow_args.judge)")
        fmt = self.task.format
        question = str(self.task.raw[fmt.prompt_key])
        prompt = self.messages()  # the system prompt and the question, as math_workflow sends them
        reference = str(self.task.raw.get(fmt.response_key, "")) if fmt.response_key else ""
        template = str(args.get("judge_prompt", JUDGE_PROMPT))
        settings = SamplingSettings(n=1, temperature=0.0, max_tokens=int(args.get("max_judge_tokens", DEFAULT_MAX_JUDGE_TOKENS)))
        pass_grade = float(args.get("pass_grade", DEFAULT_PASS_GRADE))
        out = []
        for i, sample in enumerate(self.sample(prompt)):
            ask = template.format(question=question, reference=reference or "(none)", response=sample.text)
            (reply,) = judge.chat([{"role": "user", "content": ask}], settings)
            grade = parse_grade(reply.text)
            score = 0.0 if grade is None else grade / 10.0
            out.append(self.make_experience(sample, i, reward=score, breakdown={
                "judge_grade": score, "judge_unparsed": float(grade is None),
                "accuracy": float(grade is not None and grade >= pass_grade)}, info={"judge_reply": reply.text}))
        return out
