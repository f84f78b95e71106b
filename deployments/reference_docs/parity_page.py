"""The generated blocks of docs/trinity-parity.md: the page is hand-written prose around blocks between
`<!-- BEGIN GENERATED: <block> ... -->` and `<!-- END GENERATED: <block> -->`, each rewritten here from
`schemas/trinity/` (and the registries it points to)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from deployments.reference_docs.markdown import ROOT, built_module, cell, code, describe, needs, preset_needs, table
from schemas import support_check
from schemas.algorithm_registry import ALGORITHM_PRESETS, FUNCTION_REGISTRIES
from schemas.data_processor import DATA_JUICER, OPERATOR_ARGS
from schemas.rewards import MATH_WORKFLOW_REWARD_FNS
from schemas.trinity import aliases, names, operators, workflows
from schemas.trinity import keys as trinity_keys
from schemas.trinity.algorithms import NOT_BUILT_FUNCTIONS, REFUSED_TYPES

PARITY_PAGE = ROOT / "docs" / "trinity-parity.md"


def _learns_from(preset: Any) -> str:
    what = "a dataset's rows (mode train)" if not preset.needs_rollout else "rollouts"
    extra = preset_needs(preset.defaults)
    return what + (f"; needs: {', '.join(extra)}" if extra else "")


# Short notes on presets and functions, checked against the registries (a note on a name that is gone is an error).
PRESET_NOTES = {
    "ppo": "GAE over a critic ([ppo.md](ppo.md))",
    "dpo": "[dpo.md](dpo.md)",
    "on_policy_distill": "the teacher is the first of `explorer.auxiliary_models` ([distill.md](distill.md))",
    "jsd": "the same teacher ([distill.md](distill.md))",
    "mix": "`auxiliary_buffers` ([mix.md](mix.md))",
    "mix_chord": "[mix.md](mix.md)",
    "dapo": "Trinity's preset: clip-higher and dynamic sampling are set in the config ([dapo.md](dapo.md))",
    "dapo_full": "**ours, not Trinity's**: this project's `dapo` before Trinity had one (the `arith` recipe's)",
    "gigpo": "a workflow that records each step's state: `frozenlake`, `sudoku`, `sciworld`, `textworld` "
             "([agents.md](agents.md))",
    "multi_step_grpo": "a multi-turn episode is one experience here",
}
FUNCTION_NOTES = {
    ("policy_loss_fn", "topk_distill"): "**ours, not Trinity's** ([distill.md](distill.md#the-teachers-top-k-topk_distill))",
    ("policy_loss_fn", "sapo"): "the paper's objective, differentiated through the ratio (below)",
    ("policy_loss_fn", "m2po"): "the torch trainer chooses its token mask over the whole batch before the loss",
    ("advantage_fn", "remax"): "the explorer also samples each task once greedily (`tasks/greedy_baseline.py`)",
    ("advantage_fn", "ppo"): "GAE; the critic: `backends/critic.py` (torch), veRL's value model (veRL)",
    ("advantage_fn", "step_wise_grpo"): "`enable_step_norm: true` is refused (below)",
    ("kl_penalty_fn", "k2"): "KL in the reward, with Trinity's adaptive coefficient ([kl.md](kl.md))",
}


def _check_notes() -> None:
    stale = [n for n in PRESET_NOTES if n not in ALGORITHM_PRESETS]
    stale += [f"{k}.{n}" for k, n in FUNCTION_NOTES if n not in FUNCTION_REGISTRIES.get(k, {})]
    if stale:
        raise ValueError(f"notes in deployments/reference_docs/parity_page.py name what the registries do not have: {stale}")


def parity_algorithm_types() -> list[str]:
    rows = []
    for name, preset in ALGORITHM_PRESETS.items():
        d = preset.defaults
        rows.append([code(name), *(code(d[k]) for k in ("advantage_fn", "policy_loss_fn", "kl_loss_fn",
                                                        "entropy_loss_fn")),
                     str(d.get("repeat_times", "")), "yes" if "critic" in needs("advantage_fn", d["advantage_fn"]) else "no",
                     _learns_from(preset), "trains" + (f"; {PRESET_NOTES[name]}" if name in PRESET_NOTES else "")])
    rows += [[code(n), "", "", "", "", "", "", "", f"the preset {code(ours)} (Trinity's other name)"]
             for n, ours in names.ALGORITHM_TYPE_ALIASES.items()]
    rows += [[code(n), "", "", "", "", "", "", "", f"**refused**: {cell(why)}"] for n, why in REFUSED_TYPES.items()]
    return table(["algorithm_type", "advantage_fn", "policy_loss_fn", "kl_loss_fn", "entropy_loss_fn", "repeat_times",
                  "critic", "learns from", "here"], rows)


def parity_functions() -> list[str]:
    rows = []
    for kind, registry in FUNCTION_REGISTRIES.items():
        refused = NOT_BUILT_FUNCTIONS.get(kind, {})
        groups: dict[str, list[str]] = {}
        for name in registry:
            if name in refused:
                what = f"**refused**: {cell(refused[name])}"
            elif module := built_module(kind, name):
                what = f"built: {code(module)}"
            else:
                found = support_check.entry_for(f"algorithm.{kind}[{name}]")
                what = describe(found[1]) if found else "—"
                what = "built" + (f": {what}" if what != "—" else "")
            if (kind, name) in FUNCTION_NOTES:
                what += f"; {FUNCTION_NOTES[(kind, name)]}"
            groups.setdefault(what, []).append(name)
        rows += [[code(kind), ", ".join(code(n) for n in members), what] for what, members in groups.items()]
    return table(["kind", "name", "here"], rows)


def _workflow_outcomes() -> dict[str, str]:
    out: dict[str, str] = {}
    every = [*workflows.TRINITY_WORKFLOWS, *(n for n in workflows.NOT_BUILT if n not in workflows.TRINITY_WORKFLOWS)]
    for name in every:
        if name == "math_workflow":
            out[name] = "runs (ours)"
        elif name in workflows.RENAMED:
            ours, renamed = workflows.RENAMED[name]
            out[name] = f"ours, as {code(ours)}" + (
                " (" + ", ".join(f"{code(k)} → {code(v)}" for k, v in renamed.items()) + ")" if renamed else "")
        elif name in workflows.MAPPED:
            out[name] = f"mapped to {code('math_workflow')}" + (
                ", scoring with the task set's reward function (refused without one)" if name == workflows.SIMPLE
                else " with Trinity's prompt and reward (below)")
        elif workflows.ASYNC_TWINS.get(name) in ("math_workflow", *workflows.MAPPED):
            out[name] = f"mapped to its synchronous twin {code(workflows.ASYNC_TWINS[name])}, then as that one"
        elif name in workflows.NOT_BUILT:
            out[name] = f"**refused**: {cell(workflows.NOT_BUILT[name])}"
        else:
            out[name] = "no entry"
    return out


def parity_workflows() -> list[str]:
    groups: dict[str, list[str]] = {}
    for name, what in _workflow_outcomes().items():
        groups.setdefault(what, []).append(name)
    rows = [[", ".join(code(n) for n in members), what] for what, members in groups.items()]
    rows.append([code("RAFT_baseline_<task>_workflow") + " (R3L's examples)", f"**refused**: {cell(workflows.R3L)}"])
    rows.append(["a Python class path", f"**refused**: {cell(workflows.CLASS_PATH)}"])
    return table(["Trinity's workflow", "here"], rows)


def parity_operators() -> list[str]:
    rows = [[", ".join(code(n) for n in OPERATOR_ARGS), "built (`buffer/operators.py`)"]]
    groups: dict[str, list[str]] = {}
    for name, why in operators.NOT_BUILT.items():
        what = (f"mapped to `algorithm.filter_groups` (metric accuracy) when a config is read; set directly: "
                f"**refused**: {cell(why)}") if name == operators.DAPO_DYNAMIC_SAMPLING else f"**refused**: {cell(why)}"
        groups.setdefault(what, []).append(name)
    rows += [[", ".join(code(n) for n in members), what] for what, members in groups.items()]
    rows.append([code(DATA_JUICER), "**refused**: Data-Juicer is not a dependency here"])
    return table(["Trinity's operator", "here"], rows)


def parity_rewards() -> list[str]:
    rows = [[", ".join(code(n) for n in MATH_WORKFLOW_REWARD_FNS), "built: `math_workflow` scores with it"]]
    rows += [[code(n), f"**refused**: {cell(why)}"] for n, why in workflows.REFUSED_REWARD_FNS.items()]
    return table(["Trinity's reward function", "here"], rows)


def parity_config_keys() -> list[str]:
    rows = []
    for label, mapping in (("synchronizer.sync_method", names.SYNC_METHOD_ALIASES),
                           ("synchronizer.sync_style", names.SYNC_STYLE_ALIASES),
                           ("explorer.rollout_model.engine_type", names.ENGINE_TYPE_ALIASES),
                           ("storage_type", names.STORAGE_TYPE_ALIASES)):
        rows += [[f"{code(label)}: {code(k)}", f"the same as {code(v)}"] for k, v in mapping.items()]
    rows += [[f"`synchronizer.sync_style`: {code(k)}", f"**refused**: {cell(why)}"]
             for k, why in names.SYNC_STYLES_NOT_BUILT.items()]
    renames = {(k, v) for model in trinity_keys.KEY_RENAMES.values() for k, v in model.items()}
    rows += [[code(k), f"renamed {code(v)}"] for k, v in sorted(renames)]
    rows.append([code("model.tinker"), "`trainer.trainer_type: tinker` and `explorer.rollout_model.engine_type: tinker`, "
                 "its settings (" + ", ".join(code(f) for f in aliases.TrinityTinkerConfig.model_fields if f != "enable")
                 + ") onto `trainer`"])
    rows.append([code("explorer.rollout_model.") + "{" + ", ".join(code(k) for k in aliases.ROLLOUT_LENGTHS) + "}",
                 f"dropped when equal to `model.*`'s; otherwise **refused**: {cell(aliases.SHARED_LENGTHS)}"])
    rows.append(["`max_actor_ckpt_to_keep` (`trainer.`, `trainer.trainer_config.trainer.`)",
                 "becomes `trainer.max_checkpoints_to_keep`"])
    rows.append(["`trainer.trainer_config.critic.`{" + ", ".join(code(".".join(k)) for k in aliases.CRITIC_KEYS)
                 + "}, `trainer.trainer_config.trainer.critic_warmup`", "become `trainer.critic.*` (a trainer that "
                 "trains a critic)"])
    rows.append(["`algorithm.policy_loss_fn_args`.{" + ", ".join(code(k) for k in aliases.MIX_BATCH_ARGS)
                 + "} of `mix` / `mix_chord`", "dropped: each part of the loss is normalised over its own rows here"])
    rows.append([code("algorithm.loss_agg_mode"), "moves into `algorithm.policy_loss_fn_args`"])
    no_effect = {}
    for model, keys in trinity_keys.NO_EFFECT.items():
        for key, why in keys.items():
            no_effect.setdefault(why, []).append(f"{key} ({model})")
    rows += [[", ".join(code(k) for k in ks), f"left out with a warning: {cell(why)}"] for why, ks in no_effect.items()]
    for model, keys in trinity_keys.NO_EFFECT_WHEN.items():
        rows += [[f"{code(key)} ({model})", f"left out with a warning when it has no effect: {cell(why)}"]
                 for key, (_, why) in keys.items()]
    rows += [[code(k), f"**refused**: {cell(why)}"] for k, why in trinity_keys.UNSUPPORTED_WHY.items()]
    rows += [[f"{code(k)}: " + ", ".join(code(v) for v in sorted(vs)), "**refused** (our default is used)"]
             for k, vs in trinity_keys.UNSUPPORTED_VALUES.items()]
    rows.append([code("data"), f"**refused**: {cell(trinity_keys.PRE_0_2_LAYOUT)}"])
    return table(["Trinity's key or value", "here"], rows)


PARITY_BLOCKS: dict[str, Callable[[], list[str]]] = {
    "algorithm-types": parity_algorithm_types,
    "functions": parity_functions,
    "workflows": parity_workflows,
    "operators": parity_operators,
    "rewards": parity_rewards,
    "config-keys": parity_config_keys,
}
BLOCK = re.compile(r"(<!-- BEGIN GENERATED: ([\w-]+) [^>]*-->\n)(.*?)(<!-- END GENERATED: \2 -->)", re.S)


def render_parity(text: str) -> str:
    """`text` (the committed page) with each generated block rewritten; every block must be there once."""
    _check_notes()
    found = [m.group(2) for m in BLOCK.finditer(text)]
    if sorted(found) != sorted(PARITY_BLOCKS):
        raise ValueError(f"{PARITY_PAGE}: generated blocks {sorted(found)}, expected {sorted(PARITY_BLOCKS)} once each")
    return BLOCK.sub(lambda m: m.group(1) + "\n".join(PARITY_BLOCKS[m.group(2)]()) + "\n" + m.group(4), text)
