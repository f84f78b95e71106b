"""What the runtime does with the buffer's settings beyond reading them (schemas/base.py's words): the task sets the
explorer rolls out, what the trainer reads (a dataset, or in RL modes the experiment's own buffer), its auxiliary
datasets and held-out pairs, and Trinity's data processor; with the conditions those entries are refused or warned
under."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from algorithms import is_preference_loss
from schemas.base import Entry, honoured, refused, resolved, validated, warned
from schemas.buffer import FEATURE_SELECTORS, DifficultyArgs, TaskSelectorConfig
from schemas.rewards import MATH_WORKFLOW_REWARD_FNS
from schemas.stage_kind import stage_kind
from schemas.trinity.workflows import CLASS_PATH, R3L, REFUSED_REWARD_FNS, is_class_path, is_r3l
from schemas.trinity.workflows import NOT_BUILT as TRINITY_WORKFLOWS_NOT_BUILT

if TYPE_CHECKING:
    from schemas.experiment_fields import ExperimentFields


def _rl_mode(value: Any, config: ExperimentFields) -> bool:
    """The trainer reads experiences (mode both or colocate, or train with an RL algorithm), not a dataset."""
    return stage_kind(config).rl




def _unknown_reward_fn(value: Any, config: ExperimentFields) -> bool:
    return value is not None and value not in MATH_WORKFLOW_REWARD_FNS and value not in REFUSED_REWARD_FNS


def _refuse_trinity_reward_fns(entry: Entry) -> Entry:
    for name, reason in REFUSED_REWARD_FNS.items():
        entry = entry.refuse_if(lambda v, c, name=name: v == name, f"Trinity's {name!r}: {reason}")
    return entry


def refuse_trinity_workflows(entry: Entry) -> Entry:
    for name, reason in TRINITY_WORKFLOWS_NOT_BUILT.items():
        entry = entry.refuse_if(lambda v, c, name=name: str(v).lower() == name.lower(), f"Trinity's {name!r}: {reason}")
    return entry.refuse_if(lambda v, c: is_r3l(v), R3L).refuse_if(lambda v, c: is_class_path(v), CLASS_PATH)


def _train_selector(config: ExperimentFields) -> TaskSelectorConfig | None:
    taskset = config.buffer.explorer_input.taskset
    return taskset.task_selector if taskset is not None else None


def _no_features(value: Any, config: ExperimentFields) -> bool:
    selector = _train_selector(config)
    return selector is None or selector.selector_type not in FEATURE_SELECTORS


def _not_difficulty_based(value: Any, config: ExperimentFields) -> bool:
    selector = _train_selector(config)
    return selector is None or selector.selector_type != "difficulty_based"


def _harder_when_unread(value: Any, config: ExperimentFields) -> bool:
    """harder_when orders offline_easy2hard and ranks difficulty_based's features for its prior rank only."""
    selector = _train_selector(config)
    return _no_features(value, config) or (selector is not None and selector.selector_type == "difficulty_based"
                                           and selector.kwargs.prior != "rank")


NO_FEATURES = "read by the offline_easy2hard and difficulty_based selectors only"


# math_workflow and its calculator variant (workflows/calculator.py): one prompt, one scoring, no workflow_args.
MATH_WORKFLOWS = ("math_workflow", "math_calculator_workflow")


def _args_of_math_workflow(value: Any, config: ExperimentFields) -> bool:
    """These workflow_args belong to a taskset rolled out by math_workflow, which takes none."""
    ei = config.buffer.explorer_input
    return any(ts.workflow_args is value and ts.default_workflow_type in MATH_WORKFLOWS and not ts.format.workflow_key
               for ts in (ei.taskset, *ei.eval_tasksets) if ts is not None)


def _base_prompt_outside_math_workflow(value: Any, config: ExperimentFields) -> bool:
    """A task set asks for a plain-text prompt but a workflow other than math_workflow may run it."""
    ei = config.buffer.explorer_input
    return bool(value) and any(ts.format.base_model_prompt and (ts.default_workflow_type not in MATH_WORKFLOWS
                                                                or ts.format.workflow_key)
                               for ts in (ei.taskset, *ei.eval_tasksets) if ts is not None)


def _trinity_math_reward(value: Any, config: ExperimentFields) -> bool:
    return value == "math_reward"



def _not_preference(value: Any, config: ExperimentFields) -> bool:
    return not is_preference_loss(config.algorithm.policy_loss_fn)



ONLY_PREFERENCE = "only a preference loss (algorithm_type dpo, policy_loss_fn dpo) reads it"
RL_BUFFER = ("in an RL mode experiences are kept in the experiment's own SQLite buffer "
             "(buffer/experiences.db in the experiment folder)")


def buffer_entries() -> dict[str, Entry]:
    """The buffer's and the data processor's entries, keyed by schema path."""
    out: dict[str, Entry] = {
        # the defaults are derived into each task set (derived values are not checked): the same refusals
        "buffer.explorer_input.default_workflow_type": refuse_trinity_workflows(honoured()),
        "buffer.explorer_input.default_eval_workflow_type": refuse_trinity_workflows(resolved(
            "buffer.explorer_input.eval_tasksets[].default_workflow_type")),
    }
    # Task sets the explorer rolls out (training and evaluation): the same fields, the same runtime.
    for _ts in ("buffer.explorer_input.taskset", "buffer.explorer_input.eval_tasksets[]"):
        out |= {
            f"{_ts}.storage_type": validated(note="task sets are read from files"),
            f"{_ts}.format.base_model_prompt": honoured().refuse_if(
                _base_prompt_outside_math_workflow, "only math_workflow writes a plain-text prompt; the other workflows "
                "chat through the chat template"),
            f"{_ts}.rollout_args.logprobs": warned("engines record the sampled token's logprob only; top logprobs are not "
                                                   "kept", when=lambda v, c: v is not None and v > 0),
            f"{_ts}.workflow_args": honoured(note="math_workflow takes none").refuse_if(
                _args_of_math_workflow, "math_workflow takes no workflow_args (q20, gsm8k_tool_agent and llm_judge_workflow do)"),
            f"{_ts}.generator_args": honoured(note="checked against its generator's model, rows from "
                                              "generators/"),
            f"{_ts}.default_workflow_type": refuse_trinity_workflows(honoured()),
            f"{_ts}.default_reward_fn_type": _refuse_trinity_reward_fns(honoured(note="math_workflow checks it")).refuse_if(
                _unknown_reward_fn, f"math_workflow scores with its own reward; known: {', '.join(MATH_WORKFLOW_REWARD_FNS)}"
            ).warn_if(_trinity_math_reward, "math_workflow scores math-verify accuracy plus a format bonus for a boxed answer "
                                            "(Trinity's math_boxed_reward); math_reward's <think>/<answer> bonus is not given"),
            f"{_ts}.task_selector.feature_keys": honoured(note="every row's, checked before the run "
                                                          "(preflight/data.py)").warn_if(_no_features, NO_FEATURES),
            f"{_ts}.task_selector.harder_when": honoured().warn_if(
                _harder_when_unread, "read by offline_easy2hard and difficulty_based's prior rank only"),
            **{f"{_ts}.task_selector.kwargs.{_arg}": honoured().warn_if(
                _not_difficulty_based, "only the difficulty_based selector reads kwargs") for _arg in DifficultyArgs.model_fields},
        }
    # The explorer_input default is derived into each taskset (derived values are not checked): the same rules.
    out["buffer.explorer_input.default_reward_fn_type"] = replace(
        resolved("buffer.explorer_input.taskset.default_reward_fn_type"),
        rules=out["buffer.explorer_input.taskset.default_reward_fn_type"].rules)
    # Evaluation reads every task once, in file order.
    out |= {f"buffer.explorer_input.eval_tasksets[].task_selector.{_field}": warned(
        "evaluation reads every task of the eval taskset once; the order does not matter")
        for _field in TaskSelectorConfig.model_fields if _field != "kwargs"}
    out |= {key: warned("evaluation reads every task of the eval taskset once; the order does not matter")
                for key in list(out) if key.startswith("buffer.explorer_input.eval_tasksets[].task_selector.")}

    # What the trainer reads: a dataset (SFT, mode train) or, in RL modes, the experiment's own buffer.
    _EB = "buffer.trainer_input.experience_buffer"
    out |= {
        f"{_EB}.storage_type": validated(note="'file' cannot stream experiences; queue and sqlite both mean the "
                                              "experiment's SQLite buffer"),
        f"{_EB}.path": honoured().warn_if(_rl_mode, f"not used: {RL_BUFFER}"),
        f"{_EB}.subset_name": honoured().warn_if(_rl_mode, f"not used: {RL_BUFFER}"),
        f"{_EB}.split": honoured().warn_if(_rl_mode, f"not used: {RL_BUFFER}"),
        f"{_EB}.format.prompt_type[chatpair]": refused("SFT and DPO rows are 'messages' or 'plaintext' (a prompt column "
                                                       "and the response columns), as in Trinity"),
        f"{_EB}.format.response_key": honoured().warn_if(
            lambda v, c: is_preference_loss(c.algorithm.policy_loss_fn),
            "not read: a preference pair's responses are the columns format.chosen_key and format.rejected_key"),
        f"{_EB}.format.chosen_key": honoured().warn_if(_not_preference, ONLY_PREFERENCE),
        f"{_EB}.format.rejected_key": honoured().warn_if(_not_preference, ONLY_PREFERENCE),
        f"{_EB}.generator_args": honoured(note="the rows of SFT data at path generator:NAME"),
        f"{_EB}.capacity": warned(
            "the SQLite buffer has no capacity limit (the schedule bounds how far the explorer runs ahead)"),
        f"{_EB}.max_read_timeout": warned(
            "the trainer waits for the explorer's experiences up to synchronizer.sync_timeout"),
    }
    # Trinity's data processor: the experience pipeline's built-in operators run on the explorer (buffer/operators.py).
    _DP = "data_processor"

    # The trainer's auxiliary datasets are read by the SFT reader (tasks/sft.py) for the mix sample strategy: the same
    # entries as an SFT dataset's, without the warnings of an RL mode's experience buffer (which they are not).
    _AUX = "buffer.trainer_input.auxiliary_buffers"
    out[_AUX] = honoured().warn_if(
        lambda v, c: c.algorithm.sample_strategy != "mix",
        "read only by algorithm.sample_strategy 'mix' (its expert rows); no other strategy reads it")
    out |= {f"{_AUX}[]{key.removeprefix(_EB)}": replace(entry, rules=tuple(r for r in entry.rules if r.when is not _rl_mode))
                for key, entry in list(out.items()) if key.startswith(f"{_EB}.") and not key.endswith(("chosen_key", "rejected_key"))}
    out[f"{_AUX}[].storage_type"] = warned("an auxiliary buffer is a dataset the trainer reads (its path); the "
                                               "storage type does not matter")
    out[f"{_AUX}[].format.chosen_key"] = warned("not read: expert rows are a prompt and a response (response_key)")
    out[f"{_AUX}[].format.rejected_key"] = warned("not read: expert rows are a prompt and a response (response_key)")
    # Held-out preference pairs are read by the DPO reader (tasks/dpo.py) and scored by the trainer at each evaluation:
    # the entries of a DPO dataset's, less the RL-mode warnings (they are no experience buffer).
    _EP = "buffer.trainer_input.eval_pairs"
    out[_EP] = honoured().warn_if(
        lambda v, c: v is not None and not stage_kind(c).trains,
        "scored by the trainer, which only a run that trains holds (mode 'both', 'colocate' or 'train')")
    out |= {f"{_EP}{key.removeprefix(_EB)}": replace(entry, rules=tuple(r for r in entry.rules if r.when not in
                                                                              (_rl_mode, _not_preference)))
                for key, entry in list(out.items()) if key.startswith(f"{_EB}.")}
    out[f"{_EP}.storage_type"] = warned("held-out pairs are a dataset (its path); the storage type does not matter")
    out[f"{_EP}.format.response_key"] = warned("not read: a pair's responses are format.chosen_key and "
                                                    "format.rejected_key")
    for _field in ("prompt_type", "prompt_key", "response_key", "system_prompt_key", "system_prompt", "messages_key",
                   "chat_template"):
        out[f"{_EB}.format.{_field}"] = out.get(f"{_EB}.format.{_field}", honoured()).warn_if(
            _rl_mode, f"not used: {RL_BUFFER}")
    return out
