"""`reasoning_gym_reward`: an answer scored by reasoning-gym's own verifier of its dataset, which math_workflow scores
with when a task set names it (the rows of `generator:reasoning_gym`, generators/).

The row's `reasoning_gym` column (JSON: dataset, seed, size, config, index) names the entry; it is regenerated as the
generator made it (its question must equal the row's, else reasoning-gym generates differently than when the rows
were made) and the answer scored with `dataset.score_answer(answer, entry)`, a number in [0, 1]; some verifiers give
partial credit (countdown: 0.05 for an expression of the wrong numbers, 0.01 for one that does not parse).

The answer is what the prompt asks for, reward_fn_args.answer_format:
  answer_tag (default)  the text of the response's last <answer>...</answer> (reasoning-gym's convention); the system
                        prompt, when the task set sets none, is reasoning-gym's default one, which asks for it
  boxed                 the content of the last \\boxed{...}; the default system prompt asks for that instead
Without one the verifier is not asked and the reward is 0.

Reward = the verifier's score (`accuracy` in the breakdown; no format bonus). Measures, as math_workflow's:
strict and lenient = the score is 1 (the answer is right), format = an answer was found.

An answer with `__` is not passed to the verifier (score 0): some verifiers parse the answer with sympy's
parse_expr, which evaluates Python.
"""

from __future__ import annotations

import re

from workflows.answers import last_boxed

# reasoning-gym's SYSTEM_PROMPTS["default"] (reasoning_gym/utils.py), and the same asking for \boxed{}.
SYSTEM_PROMPTS = {
    "answer_tag": (
        "Given a problem, your task is to answer the question by thinking step-by-step in a clear and specific manner.\n"
        "Once you have thought about the reasoning process, provide the answer in the following format:\n"
        "<answer>answer here</answer>\n"
        "Do not explain your reasoning inside the answer tags, provide only the final answer. When an example is "
        "provided, you should strictly follow the format of the output/answer in that example.\n"
    ),
    "boxed": (
        "Given a problem, your task is to answer the question by thinking step-by-step in a clear and specific manner.\n"
        "Then give only the final answer in \\boxed{}, e.g. \\boxed{42}, following the format the problem asks for.\n"
    ),
}
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_MAX_ANSWER_CHARS = 2000


def extract_answer(response: str, fmt: str = "answer_tag") -> str | None:
    """The answer of a response: the last <answer>...</answer> (answer_tag) or \\boxed{...} (boxed), stripped."""
    if fmt == "boxed":
        return last_boxed(response)
    found = _ANSWER.findall(response)
    return found[-1].strip() if found else None


def score_reasoning_gym(response: str, source: str, question: str | None = None,
                        fmt: str = "answer_tag") -> dict[str, float]:
    """Reward breakdown in math_workflow's keys (accuracy + format_bonus, strict / lenient / format) of one response
    to the entry the `reasoning_gym` column `source` names; `question` (the row's) is checked against the entry."""
    from generators.reasoning_gym import reasoning_gym_entry

    dataset, entry = reasoning_gym_entry(source)
    if question is not None and entry["question"] != question:
        raise ValueError(f"reasoning-gym regenerates another question for {source}: the rows were made by another "
                         "version of reasoning-gym; make them again")
    answer = extract_answer(response, fmt)
    score = 0.0
    if answer is not None and len(answer) <= _MAX_ANSWER_CHARS and "__" not in answer:
        try:
            score = float(dataset.score_answer(answer, entry))
        except Exception:  # noqa: BLE001 - a verifier that fails on an odd answer: the answer is not right
            score = 0.0
    right = score >= 1.0
    return {"accuracy": score, "format_bonus": 0.0, "strict": float(right), "lenient": float(right),
            "format": float(answer is not None)}
