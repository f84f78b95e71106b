"""Trinity's workflow names that ours cover with other settings (the only place they live).

`math_boxed_workflow` (Trinity's `MathBoxedWorkflow`, trinity/common/workflows/customized_math_workflows.py)
chats the problem under its own system prompt and rewards `MathBoxedRewardFn`: accuracy of the last
\\boxed{} answer (1 or 0; none boxed: 0) against the gold's \\boxed{} answer (or the whole gold), and no
format bonus. It reads no reward_fn_args and no default_reward_fn_type. That is our `math_workflow`
with `reward_fn_args: {require_boxed: true, format_score: 0.0}`, reward `math_boxed_reward` and Trinity's
prompt as `format.system_prompt` when the file sets none; the answers are compared by math-verify here
(Trinity: the Hendrycks MATH string normalisation), which accepts equal answers in other forms too.
Of its workflow_args, `use_base: true` (a plain-text prompt for a base model, no chat template: "System:"
+ system prompt + "\nUser:\n" + problem + "\nAssistant:\n") is our `format.base_model_prompt: true`, the
same text; `with_think: true` (Trinity's <think> system prompt when the file sets none, and −format_score_coef,
default 0.1, for a response without one <think>...</think>) is `reward_fn_args.think_penalty` and that prompt;
the others have no effect there (nor here) and are dropped.

Each mapping is noted in `derived` under an ALIAS reason, per task set.

The other workflows Trinity's example configs name are not built here; `NOT_BUILT` says why, and
validation refuses them by name (schemas/support.py), as it does R3L's RAFT_baseline_<task>_workflow
and a Python class path (Trinity loads a workflow from its plugin folders by path).
"""

from __future__ import annotations

from typing import Any

from schemas.base import ALIAS

MATH_BOXED = "math_boxed_workflow"
# Trinity's default system prompt of math_boxed_workflow (without with_think).
MATH_BOXED_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
# ... and with with_think (Trinity's wording, kept as it is).
MATH_BOXED_THINK_PROMPT = (
    "You are a helpful assistant that solves MATH problems. You should first thinks about the reasoning process in "
    "mind and then provides the user with the answer. You should present your reasoning process using the format: "
    "<think>\n ...your reasoning process here... </think>\n first. You should always include your final answer in "
    "\\boxed{} as closed-form results."
)
MATH_BOXED_REWARD_ARGS = {"require_boxed": True, "format_score": 0.0}
_ENV = ("it plays a text-game environment (ALFWorld, ScienceWorld, WebShop or FrozenLake), which is not installed "
        "and no workflow here drives; the multi-turn workflows here are q20 and gsm8k_tool_agent")
_AGENTSCOPE = ("an AgentScope agent: AgentScope is not installed; gsm8k_tool_agent is this project's tool-calling agent, "
               "and algorithm multi_step_grpo trains multi-turn episodes")
_JUDGE = ("a judge model (explorer.auxiliary_models) scores each group's responses together (RULER's ranking), which is "
          "not built; llm_judge_workflow here has an auxiliary model grade each response on its own (docs/judge.md)")
R3L = "R3L's RAFT baseline workflow (its own prompts and reward for its task, Trinity's example code); not built"
# Trinity's workflows named by its example configs that no workflow here stands for: {name: why}.
NOT_BUILT: dict[str, str] = {
    **dict.fromkeys(("alfworld_workflow", "alfworld_workflow_v2", "RAFT_alfworld_workflow",
                     "RAFT_reflect_alfworld_workflow", "sciworld_workflow", "webshop_workflow",
                     "frozen_lake_workflow"), _ENV),
    **dict.fromkeys(("as_react_workflow", "agentscope_reactv2_math_workflow", "agentscope_reactv2_gsm8k_workflow",
                     "agentscope_v1_react_search_workflow"), _AGENTSCOPE),
    "agentopia_workflow": "its tasks come from an environment service (storage_type env_service, AppWorld), which is "
                          "not built",
    **dict.fromkeys(("math_ruler_workflow", "medicine_ruler_workflow", "rubric_judge_workflow"), _JUDGE),
    "math_trainable_ruler_workflow": "the policy also judges its own group (trainable RULER) and learns from that; not built",
    "learn2ask_workflow": "a user-simulator model (explorer.auxiliary_models) rates each question; no workflow here "
                          "drives one",
    **dict.fromkeys(("on_policy_distill_workflow", "async_on_policy_distill_workflow", "on_policy_distill_math_workflow",
                     "async_on_policy_distill_math_workflow"),
                    "here the teacher (the first of explorer.auxiliary_models) scores the samples of any workflow when "
                    "algorithm_type is on_policy_distill or jsd: run math_workflow"),
    "bcp_simple_react_workflow": "a search agent over a BrowseComp-Plus index, which is not installed",
    "toolcall_workflow": "it scores function calls against a tools column (format.tools_key), which no workflow here "
                         "reads; gsm8k_tool_agent's calculator is in its code",
    "simple_mm_workflow": "it reads images (format.image_key): the engines and trainers here are text-only",
    "bots_math_boxed_workflow": "BOTS's workflow (Trinity's example plugin): math_boxed_workflow plus the pass rates its "
                                "difficulty_based task selector reads, which is not built",
}
# R3L's examples (examples/R3L/*) each name a RAFT baseline workflow of their own: RAFT_baseline_<task>_workflow.
R3L_PREFIX = "raft_baseline_"
CLASS_PATH = ("a Python class path: Trinity loads such a workflow from its plugin folders; only this project's "
              "registered workflows run (math_workflow, q20, gsm8k_tool_agent, hello_workflow, llm_judge_workflow)")


def map_workflows(data: dict[str, Any], notes: dict[str, str]) -> None:
    """Rewrite the task sets of raw config `data` that run a Trinity workflow name we cover (module docstring)."""
    buffer = data.get("buffer")
    ei = buffer.get("explorer_input") if isinstance(buffer, dict) else None
    if not isinstance(ei, dict):
        return
    base = "buffer.explorer_input"
    default, eval_default = ei.get("default_workflow_type"), ei.get("default_eval_workflow_type")
    tasksets, eval_tasksets = (ei.get(k) if isinstance(ei.get(k), list) else [] for k in ("tasksets", "eval_tasksets"))
    train = [(f"{base}.taskset", ei.get("taskset"))] + [
        (f"{base}.taskset" if len(tasksets) == 1 else f"{base}.tasksets.{i}", ts) for i, ts in enumerate(tasksets)]
    evals = [(f"{base}.eval_tasksets.{i}", ts) for i, ts in enumerate(eval_tasksets)]  # a wrong type: validation names it
    for path, ts, inherited in [*((p, t, default) for p, t in train),
                                *((p, t, eval_default if eval_default is not None else default) for p, t in evals)]:
        if isinstance(ts, dict) and (ts.get("default_workflow_type") or inherited) == MATH_BOXED:
            _math_boxed(ts, path, ei.get("default_reward_fn_type"), notes)
    for key, value in (("default_workflow_type", default), ("default_eval_workflow_type", eval_default)):
        if value == MATH_BOXED:
            ei[key] = "math_workflow"
            notes[f"{base}.{key}"] = f"{ALIAS}{MATH_BOXED}: math_workflow (each task set that runs it is mapped)"


def _math_boxed(ts: dict[str, Any], path: str, inherited_reward: Any, notes: dict[str, str]) -> None:
    args = ts.pop("workflow_args", None) or {}
    args = args if isinstance(args, dict) else {}  # another type: Trinity's workflow reads none of it either
    if args:
        notes[f"{path}.workflow_args"] = (f"{ALIAS}{MATH_BOXED} reads only use_base and with_think (with "
                                          "format_score_coef), mapped where set; the rest change nothing there either")
    fmt = ts.setdefault("format", {})
    if args.get("use_base") and isinstance(fmt, dict):
        fmt["base_model_prompt"] = True
        notes[f"{path}.format.base_model_prompt"] = (f"{ALIAS}{path}.workflow_args.use_base: {MATH_BOXED}'s plain-text "
                                                     "prompt for a base model, without the chat template")
    ts["default_workflow_type"] = "math_workflow"
    notes[f"{path}.default_workflow_type"] = (f"{ALIAS}{MATH_BOXED}: math_workflow scoring the \\boxed{{}} answer's accuracy "
                                              "only (Trinity's MathBoxedRewardFn; compared by math-verify)")
    reward = ts.get("default_reward_fn_type") or inherited_reward
    ts["default_reward_fn_type"] = "math_boxed_reward"
    if reward not in (None, "math_boxed_reward"):
        notes[f"{path}.default_reward_fn_type"] = f"{ALIAS}{reward!r} replaced: {MATH_BOXED} always rewards math_boxed_reward"
    given = ts.get("reward_fn_args") if isinstance(ts.get("reward_fn_args"), dict) else {}
    ts["reward_fn_args"] = dict(MATH_BOXED_REWARD_ARGS)
    notes[f"{path}.reward_fn_args"] = f"{ALIAS}{MATH_BOXED}: no format bonus, no accuracy outside \\boxed{{}}" + (
        f" ({', '.join(sorted(given))} dropped: {MATH_BOXED} reads no reward_fn_args)" if given else "")
    think = bool(args.get("with_think"))
    if think:
        ts["reward_fn_args"]["think_penalty"] = float(args.get("format_score_coef") or 0.1)
        notes[f"{path}.reward_fn_args"] += (f"; think_penalty: {path}.workflow_args.with_think (−format_score_coef "
                                            "without one <think>...</think>)")
    if isinstance(fmt, dict) and fmt.get("system_prompt") is None:
        fmt["system_prompt"] = MATH_BOXED_THINK_PROMPT if think else MATH_BOXED_PROMPT
        notes[f"{path}.format.system_prompt"] = f"{ALIAS}{MATH_BOXED}'s default prompt" + (" with_think" if think else "")


def is_r3l(name: object) -> bool:
    """One of R3L's RAFT_baseline_<task>_workflow, in any case (its examples write RAFT_baseline_..., its
    code registers raft_baseline_...)."""
    return isinstance(name, str) and name.lower().startswith(R3L_PREFIX)


def is_class_path(name: object) -> bool:
    """A workflow given as a dotted Python class path (Trinity's plugins), not a registered name."""
    return isinstance(name, str) and "." in name
