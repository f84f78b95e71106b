"""`gsm8k_tool_agent`: a GSM8K solver that may call a calculator, written against the `openai` client.

The agent is plain OpenAI-style code (chat completions with `tools`, `tool_choice="auto"`, tool results
sent back as `role: tool` messages): the model decides whether to call `calculator`; the engine's
endpoint parses its calls with vLLM's tool-call parser (`explorer.rollout_model.tool_call_parser`, e.g.
`hermes` for the `<tool_call>{...}</tool_call>` format of `CHATML_TOOLS_TEMPLATE` below) and records
every call for training (`workflows.agent`).

Reward: math_workflow's (accuracy of the final answer + the \\boxed{} format bonus) plus `tool_score`
(default 0.05) when the episode made at least one calculator call that evaluated.

workflow_args: max_calls (default 4) model calls per episode, tool_score, episode_timeout_s, and
first_call: "auto" (default: the model decides) or "calculator": the first call is constrained to a
calculator call in the template's own <tool_call> format (vLLM structured outputs, a regex), for a model
too small to call tools by itself (SmolLM2-135M never does). That call is recorded as constrained: its
tokens are context (mask 0, see workflows.trajectory), the answer after the tool result is trained. The
call written back continues its sampled tokens (the endpoint's `continue_sampled`), so the episode is one
experience: forced call and tool result (mask 0), then the model's own answer (mask 1).
"""

from __future__ import annotations

import json
from typing import Any

from workflows.agent import AgentOutcome, AgentWorkflow
from workflows.arithmetic import TOOL, evaluate
from workflows.base import register_workflow
from workflows.math_workflow import DEFAULT_FORMAT_SCORE, gold_answer, score_math

SYSTEM_PROMPT = (
    "Solve the math problem. You may use the calculator tool for arithmetic. "
    "Give the final answer, a number only, in \\boxed{}, e.g. \\boxed{42}."
)
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression (+ - * / and parentheses) and return the number.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. (12 + 7) * 3"}},
            "required": ["expression"],
        },
    },
}
DEFAULT_TOOL_SCORE = 0.05
DEFAULT_MAX_CALLS = 4
# A calculator call in CHATML_TOOLS_TEMPLATE's format (the hermes parser reads it); the endpoint continues
# its sampled tokens when it is written back, however the template re-tokenizes it.
CALCULATOR_CALL_REGEX = (r'<tool_call>\n\{"name": "calculator", "arguments": \{"expression": '
                         r'"[0-9][0-9+\-*/(). ]{0,40}"\}\}\n</tool_call>')

# ChatML (SmolLM2's format) with tools in the Hermes style: the tool list in the system turn, calls as
# <tool_call>{"name": ..., "arguments": ...}</tool_call>, results as <tool_response> in a user turn.
CHATML_TOOLS_TEMPLATE = (
    "{% set system = messages[0]['content'] if messages[0]['role'] == 'system' else '' %}"
    "{% if tools %}"
    "{{ '<|im_start|>system\\n' + (system + '\\n\\n' if system else '') + 'You can call these functions "
    "(signatures inside <tools></tools>):\\n<tools>' }}"
    "{% for tool in tools %}{{ '\\n' + (tool | tojson) }}{% endfor %}"
    "{{ '\\n</tools>\\nTo call one, answer with <tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{% elif system %}{{ '<|im_start|>system\\n' + system + '<|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{% elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{ '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{% for call in message['tool_calls'] %}"
    "{% set arguments = call['function']['arguments'] %}"
    "{{ '<tool_call>\\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' "
    "+ (arguments if arguments is string else arguments | tojson) + '}\\n</tool_call>' }}"
    "{% endfor %}{{ '<|im_end|>\\n' }}"
    "{% elif message['role'] == 'tool' %}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

def calculate(expression: str) -> float:
    """An arithmetic expression's value (workflows/arithmetic.py, with // % and small powers); anything else is a
    ValueError."""
    value = evaluate(expression.replace(",", "").replace("x", "*"), TOOL)
    try:
        return float(value)
    except OverflowError as err:
        raise ValueError("number too large") from err


def format_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


def solve(client: Any, model: str, question: str, sampling: dict[str, Any], max_calls: int,
          first_call: str = "auto") -> tuple[str, int, int]:
    """The agent: returns (final answer text, tool calls asked for, tool calls that evaluated)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    asked = worked = 0
    answer = ""
    for turn in range(max_calls):
        kwargs = dict(sampling)
        if turn == 0 and first_call == "calculator":
            kwargs["extra_body"] = {**kwargs.get("extra_body", {}), "structured_outputs": {"regex": CALCULATOR_CALL_REGEX}}
        reply = client.chat.completions.create(model=model, messages=messages, tools=[CALCULATOR], tool_choice="auto",
                                               **kwargs)
        message = reply.choices[0].message
        answer = message.content or ""
        if not message.tool_calls:
            break
        messages.append({"role": "assistant", "content": message.content,
                         "tool_calls": [c.model_dump() for c in message.tool_calls]})
        for call in message.tool_calls:
            asked += 1
            try:
                result = format_number(calculate(str(json.loads(call.function.arguments).get("expression", ""))))
                worked += 1
            except (ValueError, AttributeError, json.JSONDecodeError) as err:
                result = f"error: {err}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return answer, asked, worked


@register_workflow("gsm8k_tool_agent")
class ToolAgentWorkflow(AgentWorkflow):
    """GSM8K with a calculator tool, through the endpoint; reward as math_workflow's plus a tool bonus."""

    @classmethod
    def required_keys(cls, fmt: Any) -> list[str]:
        return [fmt.prompt_key, fmt.response_key]

    def run_agent(self, client: Any, model: str, sampling: dict[str, Any]) -> AgentOutcome:
        args = self.task.workflow_args or {}
        fmt = self.task.format
        question, gold = str(self.task.raw[fmt.prompt_key]), gold_answer(str(self.task.raw[fmt.response_key]))
        first_call = str(args.get("first_call", "auto"))
        if first_call not in ("auto", "calculator"):
            raise ValueError(f"workflow_args.first_call: 'auto' or 'calculator', not {first_call!r}")
        answer, asked, worked = solve(client, model, question, sampling, int(args.get("max_calls", DEFAULT_MAX_CALLS)),
                                      first_call)
        breakdown = score_math(answer, gold, format_score=float((self.task.reward_fn_args or {}).get("format_score",
                                                                                                   DEFAULT_FORMAT_SCORE)))
        breakdown["tool"] = float(args.get("tool_score", DEFAULT_TOOL_SCORE)) if worked else 0.0
        return AgentOutcome(
            reward=sum(breakdown.values()), breakdown=breakdown,
            metrics={"success": breakdown["accuracy"], "tool_calls": float(asked), "tool_calls_ok": float(worked)},
        )
