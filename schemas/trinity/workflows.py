"""Trinity's workflow names that ours cover with other settings, and why the others are refused (the only place
they live).

Read from Trinity-RFT main's WORKFLOWS registry (trinity/common/workflows/__init__.py, agentscope-ai/Trinity-RFT) and
the classes it points to; TRINITY_WORKFLOWS below lists its names, and each is mapped here or refused at validation
(tests/test_trinity_parity.py), never first at run time.

`math_boxed_workflow` (Trinity's `MathBoxedWorkflow`, trinity/common/workflows/customized_math_workflows.py on main)
chats the problem under its own system prompt and scores it with the task set's reward function (default_reward_fn_type
with its reward_fn_args), by default `MathBoxedRewardFn`: accuracy of the last \\boxed{} answer (1 or 0; none boxed:
0) against the gold's \\boxed{} answer (or the whole gold), no format bonus, no reward_fn_args. A response cut at the
token limit ("response_truncated") gets an all-zero action mask: it adds nothing to the loss. That is our
`math_workflow` with Trinity's prompt as `format.system_prompt` when the file sets none; with no reward function named
(or math_boxed_reward), reward `math_boxed_reward` with `reward_fn_args: {require_boxed: true, format_score: 0.0}`
(the answers are compared by math-verify here; Trinity: the Hendrycks MATH string normalisation, so equal answers in
other forms count here too); with another that math_workflow scores with (math_dapo_reward, ...), that one and its
reward_fn_args. The masking is the `mask_response_truncated` operator, put first in the experience pipeline when a
training task set runs it (it masks the step's other experiences too). Of its workflow_args, `use_base: true` (a
plain-text prompt for a base model, no chat template: "System:" + system prompt + "\\nUser:\\n" + problem +
"\\nAssistant:\\n") is our `format.base_model_prompt: true`, the same text; `with_think: true` (Trinity's <think>
system prompt when the file sets none, and, with MathBoxedRewardFn, −format_score_coef, default 0.1, for a response
without one <think>...</think>) is that prompt and `reward_fn_args.think_penalty`; the others have no effect there (nor
here) and are dropped.

`simple_workflow` (Trinity's `SimpleWorkflow`) chats the problem (the system prompt only when the file sets one) and
scores it with the task set's reward function, which it needs (Trinity raises without one): math_workflow with that
reward, and `format.system_prompt: ""` when the file sets none (math_workflow's own default prompt otherwise).

Trinity's `async_*` workflows are the same workflows through the engine's asynchronous API: those of a workflow that
runs here become it (ASYNC_TWINS), the others are refused with their twin's reason.

Each mapping is noted in `derived` under an ALIAS reason, per task set. The other workflows are not built here:
`NOT_BUILT` says why, and validation refuses them by name (a `SETTINGS` entry), as it does R3L's
RAFT_baseline_<task>_workflow and a Python class path (Trinity loads a workflow from its plugin folders by path).
"""

from __future__ import annotations

from typing import Any

from schemas.base import ALIAS
from schemas.trinity.operators import MASK_TRUNCATED, ensure_first

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
_ENV = ("it plays an environment (WebShop or InterCode-SQL's docker database), which is not installed and no "
        "workflow here drives; the environments here are frozenlake, sudoku and sciworld (Trinity's "
        "frozen_lake_workflow, sudoku_workflow and sciworld_workflow), textworld, and the multi-turn workflows q20 and "
        "gsm8k_tool_agent")
_AGENTSCOPE = ("an AgentScope agent: AgentScope is not installed; gsm8k_tool_agent is this project's tool-calling agent, "
               "and algorithm multi_step_grpo trains multi-turn episodes")
_JUDGE = ("a judge model (explorer.auxiliary_models) scores each group's responses together (RULER's ranking), which is "
          "not built; llm_judge_workflow here has an auxiliary model grade each response on its own (docs/judge.md)")
_TOOLS = ("it scores function calls against a tools column (format.tools_key), which no workflow here reads; "
          "gsm8k_tool_agent's calculator is in its code")
_ALFWORLD = ("it plays the ALFWorld environment, whose game files (ALFRED's data) are a download that cannot be made here; ALFWorld "
             "runs on TextWorld, and the workflow textworld plays TextWorld games generated locally (the stand-in: "
             "docs/recipes/textworld.md)")
R3L = "R3L's RAFT baseline workflow (its own prompts and reward for its task, Trinity's example code); not built"
SIMPLE = "simple_workflow"
# Trinity-RFT main's WORKFLOWS registry (trinity/common/workflows/__init__.py, default_mapping): each name runs here
# (math_workflow), is mapped (MAPPED, ASYNC_TWINS) or is refused (NOT_BUILT).
TRINITY_WORKFLOWS = (
    "simple_workflow", "async_simple_workflow", "math_workflow", "async_math_workflow", "math_boxed_workflow",
    "async_math_boxed_workflow", "math_eval_workflow", "async_math_eval_workflow", "math_rm_workflow",
    "async_math_rm_workflow", "tool_call_workflow", "agentscope_workflow_adapter", "agentscope_workflow_adapter_v1",
    "agentscope_react_workflow", "agentscope_react_math_workflow", "as_react_workflow",
    "agentscopev0_react_math_workflow", "agentscope_v1_react_search_workflow", "email_search_workflow",
    "alfworld_workflow", "RAFT_alfworld_workflow", "RAFT_reflect_alfworld_workflow", "frozen_lake_workflow",
    "sciworld_workflow", "webshop_workflow", "intercode_sql_workflow", "step_wise_alfworld_workflow",
    "async_math_ruler_workflow", "math_ruler_workflow", "math_trainable_ruler_workflow", "rubric_judge_workflow",
    "rubric_judge_openai_workflow", "simple_mm_workflow", "async_simple_mm_workflow", "on_policy_distill_workflow",
    "on_policy_distill_math_workflow", "thinking_budget_workflow", "sudoku_workflow",
)
# Trinity's workflows that become ours with other settings (the module docstring).
MAPPED = (MATH_BOXED, SIMPLE)
# Trinity's environment workflows that ours play under another name: {name: (ours, {its workflow_args key: ours})}.
RENAMED: dict[str, tuple[str, dict[str, str]]] = {
    "frozen_lake_workflow": ("frozenlake", {"max_steps": "max_turns"}),
    "sudoku_workflow": ("sudoku", {}),
    "sciworld_workflow": ("sciworld", {}),
}
# Trinity's asynchronous twins: {name: the workflow it runs}.
ASYNC_TWINS = {f"async_{name}": name for name in ("simple_workflow", "math_workflow", "math_boxed_workflow",
                                                  "math_eval_workflow", "math_rm_workflow", "math_ruler_workflow",
                                                  "simple_mm_workflow", "on_policy_distill_workflow",
                                                  "on_policy_distill_math_workflow")}
# Trinity's workflows (its registry on main, and those its example configs name) that no workflow here stands for:
# {name: why}.
NOT_BUILT: dict[str, str] = {
    **dict.fromkeys(("alfworld_workflow", "alfworld_workflow_v2", "RAFT_alfworld_workflow",
                     "RAFT_reflect_alfworld_workflow", "step_wise_alfworld_workflow"), _ALFWORLD),
    **dict.fromkeys(("webshop_workflow", "intercode_sql_workflow"), _ENV),
    **dict.fromkeys(("as_react_workflow", "agentscope_reactv2_math_workflow", "agentscope_reactv2_gsm8k_workflow",
                     "agentscope_v1_react_search_workflow", "agentscope_workflow_adapter", "agentscope_workflow_adapter_v1",
                     "agentscope_react_workflow", "agentscope_react_math_workflow", "agentscopev0_react_math_workflow"),
                    _AGENTSCOPE),
    "email_search_workflow": "an AgentScope agent that searches an e-mail database (its own index) and a judge model "
                             "that grades its answer: AgentScope and the database are not installed here",
    "agentopia_workflow": "its tasks come from an environment service (storage_type env_service, AppWorld), which is "
                          "not built",
    **dict.fromkeys(("math_ruler_workflow", "medicine_ruler_workflow", "rubric_judge_workflow"), _JUDGE),
    "rubric_judge_openai_workflow": "a judge reached through an OpenAI-compatible API grades each response against a "
                                    "rubric column, which is not built; llm_judge_workflow here has an auxiliary model "
                                    "grade each response (docs/judge.md)",
    "math_trainable_ruler_workflow": "the policy also judges its own group (trainable RULER) and learns from that; not built",
    "learn2ask_workflow": "a user-simulator model (explorer.auxiliary_models) rates each question; no workflow here "
                          "drives one",
    **dict.fromkeys(("on_policy_distill_workflow", "on_policy_distill_math_workflow"),
                    "here the teacher (the first of explorer.auxiliary_models) scores the samples of any workflow when "
                    "algorithm_type is on_policy_distill or jsd: run math_workflow"),
    "bcp_simple_react_workflow": "a search agent over a BrowseComp-Plus index, which is not installed",
    "tool_call_workflow": _TOOLS,
    "toolcall_workflow": _TOOLS,  # the name Trinity's examples spelt it by before
    "simple_mm_workflow": "it reads images (format.image_key): the engines and trainers here are text-only",
    "bots_math_boxed_workflow": "BOTS's workflow (Trinity's example plugin): its prompt column is already a message list "
                                "and its own scorer (compute_score_bots) grades the boxed answer; no workflow here takes a "
                                "message list as the prompt. Its difficulty_based task selector runs here "
                                "(task_selector, docs/generators.md)",
    "math_eval_workflow": "Trinity's Qwen2.5-Math evaluation: a fixed prompt (the 'question' column with 'Please reason "
                          "step by step, and put your final answer within \\boxed{}.' appended), fixed sampling "
                          "(temperature 0.6, top_p 0.8, one answer) and only an accuracy metric; no workflow here appends "
                          "to the prompt. The nearest: math_workflow with default_reward_fn_type accuracy_reward",
    "math_rm_workflow": "it scores with a reward model or an LLM grader called with the whole conversation (RM-Gallery / "
                        "OpenJudge reward functions), which are not built; llm_judge_workflow here has an auxiliary "
                        "model grade each response (docs/judge.md)",
    "thinking_budget_workflow": "it asks vLLM's OpenAI endpoint to end the reasoning at workflow_args.thinking_token_budget "
                                "tokens (a sampling option of newer vLLM) and masks the forced </think>; the engines here "
                                "do not pass that option",
    SIMPLE: "Trinity's simple_workflow scores with the task set's reward function (default_reward_fn_type) and raises "
            "without one: name one (math_boxed_reward, accuracy_reward, math_dapo_reward, ...) and it runs as "
            "math_workflow",
}
# The async twins of the workflows refused above, with their twin's reason.
NOT_BUILT |= {twin: f"the asynchronous twin of {name}: {NOT_BUILT[name]}" for twin, name in ASYNC_TWINS.items()
              if name in NOT_BUILT and name != SIMPLE}
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
    tasksets, eval_tasksets = (ei.get(k) if isinstance(ei.get(k), list) else [] for k in ("tasksets", "eval_tasksets"))
    train = [(f"{base}.taskset", ei.get("taskset"))] + [
        (f"{base}.taskset" if len(tasksets) == 1 else f"{base}.tasksets.{i}", ts) for i, ts in enumerate(tasksets)]
    evals = [(f"{base}.eval_tasksets.{i}", ts) for i, ts in enumerate(eval_tasksets)]  # a wrong type: validation names it
    for path, holder in [(base, ei), *((p, t) for p, t in train + evals if isinstance(t, dict))]:
        for key in ("default_workflow_type", "default_eval_workflow_type"):
            twin = holder.get(key)
            if isinstance(twin, str) and ASYNC_TWINS.get(twin) in ("math_workflow", *MAPPED):
                holder[key] = ASYNC_TWINS[twin]
                notes[f"{path}.{key}"] = f"{ALIAS}{twin}: {holder[key]} (Trinity's asynchronous twin of it)"
    for path, ts, keys in [*((p, t, ("default_workflow_type",)) for p, t in train),
                           *((p, t, ("default_eval_workflow_type", "default_workflow_type")) for p, t in evals)]:
        if isinstance(ts, dict):  # the workflow it runs, its own or the explorer_input's default, before renaming
            name = next((h.get(k) for h in (ts, ei) for k in keys if isinstance(h.get(k), str)), None)
            _rename_workflow_args(ts, path, name, notes)
    for path, holder in [(base, ei), *((p, t) for p, t in train + evals if isinstance(t, dict))]:
        _rename_environments(holder, path, notes)
    default, eval_default = ei.get("default_workflow_type"), ei.get("default_eval_workflow_type")
    masked: list[str] = []
    for path, ts, inherited, trains in [*((p, t, default, True) for p, t in train),
                                        *((p, t, eval_default if eval_default is not None else default, False)
                                          for p, t in evals)]:
        if not isinstance(ts, dict):
            continue
        workflow = ts.get("default_workflow_type") or inherited
        reward = ts.get("default_reward_fn_type") or ei.get("default_reward_fn_type")
        if workflow == MATH_BOXED:
            _math_boxed(ts, path, reward, notes)
            masked += [path] if trains else []
        elif workflow == SIMPLE and reward:
            _simple(ts, path, reward, notes)
        elif workflow == SIMPLE:
            ts["default_workflow_type"] = SIMPLE  # stays (refused: it needs a reward function) when the default is mapped
    for key, value in (("default_workflow_type", default), ("default_eval_workflow_type", eval_default)):
        if value in MAPPED:
            ei[key] = "math_workflow"
            notes[f"{base}.{key}"] = f"{ALIAS}{value}: math_workflow (each task set that runs it is mapped)"
    if masked:
        ensure_first(data, MASK_TRUNCATED, notes, f"{MATH_BOXED} of {', '.join(masked)}: Trinity's workflow gives a "
                     "response cut at the token limit an all-zero mask (this operator masks every such response of the "
                     "step)")


def _rename_environments(holder: dict[str, Any], path: str, notes: dict[str, str]) -> None:
    """Trinity's FrozenLake, Sudoku and ScienceWorld workflows are ours under our names."""
    for key in ("default_workflow_type", "default_eval_workflow_type"):
        name = holder.get(key)
        if isinstance(name, str) and name in RENAMED:
            holder[key] = RENAMED[name][0]
            notes[f"{path}.{key}"] = f"{ALIAS}{name}: {holder[key]}"


def _rename_workflow_args(ts: dict[str, Any], path: str, name: str | None, notes: dict[str, str]) -> None:
    """A task set that runs one of RENAMED: its workflow_args under our keys."""
    args = ts.get("workflow_args")
    if name not in RENAMED or not isinstance(args, dict):
        return
    for theirs, mine in RENAMED[name][1].items():
        if theirs in args and mine not in args:
            args[mine] = args.pop(theirs)
            notes[f"{path}.workflow_args.{mine}"] = f"{ALIAS}{path}.workflow_args.{theirs} ({name})"


def _math_boxed(ts: dict[str, Any], path: str, reward: Any, notes: dict[str, str]) -> None:
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
    think = bool(args.get("with_think"))
    if reward in (None, "math_boxed_reward"):  # Trinity's MathBoxedRewardFn, which reads no reward_fn_args
        notes[f"{path}.default_workflow_type"] = (f"{ALIAS}{MATH_BOXED}: math_workflow scoring the \\boxed{{}} answer's "
                                                  "accuracy only (Trinity's MathBoxedRewardFn; compared by math-verify)")
        ts["default_reward_fn_type"] = "math_boxed_reward"
        given = ts.get("reward_fn_args") if isinstance(ts.get("reward_fn_args"), dict) else {}
        ts["reward_fn_args"] = dict(MATH_BOXED_REWARD_ARGS)
        notes[f"{path}.reward_fn_args"] = f"{ALIAS}{MATH_BOXED}: no format bonus, no accuracy outside \\boxed{{}}" + (
            f" ({', '.join(sorted(given))} dropped: MathBoxedRewardFn reads no reward_fn_args)" if given else "")
        if think:
            ts["reward_fn_args"]["think_penalty"] = float(args.get("format_score_coef") or 0.1)
            notes[f"{path}.reward_fn_args"] += (f"; think_penalty: {path}.workflow_args.with_think (−format_score_coef "
                                                "without one <think>...</think>)")
    else:  # Trinity's workflow scores with the task set's reward function and its reward_fn_args
        ts["default_reward_fn_type"] = reward
        notes[f"{path}.default_workflow_type"] = (f"{ALIAS}{MATH_BOXED}: math_workflow scoring with {reward} and its "
                                                  "reward_fn_args, as Trinity's workflow does")
        if think:
            notes[f"{path}.reward_fn_args"] = (f"{ALIAS}{path}.workflow_args.with_think: no think_penalty ({reward} "
                                               "ignores it in Trinity too; it is MathBoxedRewardFn's)")
    if isinstance(fmt, dict) and fmt.get("system_prompt") is None:
        fmt["system_prompt"] = MATH_BOXED_THINK_PROMPT if think else MATH_BOXED_PROMPT
        notes[f"{path}.format.system_prompt"] = f"{ALIAS}{MATH_BOXED}'s default prompt" + (" with_think" if think else "")


def _simple(ts: dict[str, Any], path: str, reward: Any, notes: dict[str, str]) -> None:
    ts["default_workflow_type"] = "math_workflow"
    notes[f"{path}.default_workflow_type"] = f"{ALIAS}{SIMPLE}: math_workflow scoring with {reward}"
    if reward == "math_boxed_reward":  # Trinity's MathBoxedRewardFn: no format bonus, reads no reward_fn_args
        ts["default_reward_fn_type"] = reward
        ts["reward_fn_args"] = dict(MATH_BOXED_REWARD_ARGS)
        notes[f"{path}.reward_fn_args"] = f"{ALIAS}{SIMPLE} with MathBoxedRewardFn: no format bonus, no accuracy outside " \
                                          "\\boxed{}"
    args = ts.pop("workflow_args", None)
    if args:
        notes[f"{path}.workflow_args"] = f"{ALIAS}dropped: {SIMPLE} reads no workflow_args"
    fmt = ts.setdefault("format", {})
    if isinstance(fmt, dict) and fmt.get("system_prompt") is None and not fmt.get("system_prompt_key"):
        fmt["system_prompt"] = ""
        notes[f"{path}.format.system_prompt"] = f"{ALIAS}{SIMPLE} sends no system prompt unless the file sets one"


def is_r3l(name: object) -> bool:
    """One of R3L's RAFT_baseline_<task>_workflow, in any case (its examples write RAFT_baseline_..., its
    code registers raft_baseline_...)."""
    return isinstance(name, str) and name.lower().startswith(R3L_PREFIX)


def is_class_path(name: object) -> bool:
    """A workflow given as a dotted Python class path (Trinity's plugins), not a registered name."""
    return isinstance(name, str) and "." in name


# The rest of Trinity-RFT's reward registry (trinity/common/rewards), each refused with why.
REFUSED_REWARD_FNS = {
    "format_reward": "Trinity's format_reward scores only a <think>/<answer> layout, which no workflow here asks "
                     "for; math_workflow's format bonus is for a \\boxed{} answer (math_boxed_reward)",
    "rm_gallery_reward": "it calls a reward model of RM-Gallery, which is not installed or served here",
    "trajectory_accuracy_grader_reward": "it asks an LLM judge (an auxiliary model), which is not built",
    "openjudge_multi_grader_reward": "it asks LLM judges (auxiliary models), which are not built",
}
