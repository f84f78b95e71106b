"""gsm8k-tools — a GSM8K agent with a calculator tool, trained through the engines' OpenAI endpoint.

The agent (workflows/tool_agent.py) is plain `openai` client code: chat completions with a `calculator`
tool (`tool_choice="auto"`), tool results sent back as `role: tool` messages. Each engine serves vLLM's
OpenAI server (`enable_openai_api`), parses the model's <tool_call> blocks (`tool_call_parser: hermes`,
with a ChatML chat template that shows the tools) and records every call (`enable_history`); the
calls become the experiences. SmolLM2-135M-Instruct on CPU: 3 steps of 2 problems × 4 episodes. The
135M model never calls the tool by itself, so the first call is a forced calculator call (see AGENT_ARGS).

Run it:  rft run gsm8k-tools          (inspect first: rft validate gsm8k-tools)
"""

from deployments.recipes.gsm8k import grpo_only as gsm8k
from workflows.tool_agent import CHATML_TOOLS_TEMPLATE

# SmolLM2-135M never calls the tool by itself: `first_call: calculator` forces a first calculator call
# (context, mask 0: sampled under a grammar), the endpoint continues its sampled tokens when the agent
# writes it back, and the model's own answer after the tool result is trained: one experience per episode.
AGENT_ARGS = {"max_calls": 3, "episode_timeout_s": 300, "first_call": "calculator"}


def agent_taskset(name: str, split: str, **extra: object) -> dict:
    return {
        "name": name, "path": "data/gsm8k", "split": split,
        "format": {"prompt_key": "question", "response_key": "answer"},
        "default_workflow_type": "gsm8k_tool_agent", "workflow_args": AGENT_ARGS, **extra,
    }


config = gsm8k.with_overrides(
    {
        "name": "gsm8k-tools",
        "algorithm.repeat_times": 4,
        "model.max_prompt_tokens": 896,  # later calls carry the earlier turns and tool results
        "model.max_response_tokens": 128,  # one call's answer
        "model.custom_chat_template": CHATML_TOOLS_TEMPLATE,
        "buffer.batch_size": 2,
        "buffer.total_steps": 3,
        "buffer.explorer_input": {
            "taskset": agent_taskset("gsm8k-tools", "train", rollout_args={"temperature": 1.0}),
            "eval_tasksets": [agent_taskset("gsm8k-tools-eval", "test[:16]", rollout_args={"temperature": 0.0},
                                            repeat_times=1)],
        },
        "explorer.eval_interval": 3,
        "explorer.rollout_model.enable_openai_api": True,
        "explorer.rollout_model.enable_history": True,
        "explorer.rollout_model.enable_auto_tool_choice": True,
        "explorer.rollout_model.tool_call_parser": "hermes",
        "trainer.save_interval": 3,
    }
)
