"""The kind of a stage (schemas/stage_kind.py): one definition of what each mode runs, asked from everywhere."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from deployments import load_recipe
from schemas.stage_kind import StageKind, stage_kind

ROOT = Path(__file__).resolve().parent.parent
SMOKE = load_recipe("smoke")  # mode both, grpo, eval tasksets
E, T, ET = ("explorer",), ("trainer",), ("explorer", "trainer")

#           explores trains from_dataset rl  exchanges shares sides flow tracking_role
KINDS = {
    "both": (True, True, False, True, True, False, ET, "both", "main"),
    "colocate": (True, True, False, True, True, True, ET, "colocate", "main"),
    "explore": (True, False, False, False, True, False, E, "explore", "explorer"),
    "train": (False, True, False, True, True, False, T, "train", "main"),
    "bench": (False, False, False, False, False, False, E, "bench", "bench"),
    "serve": (False, False, False, False, False, False, E, "serve", "serve"),
}


def _kind(explores, trains, from_dataset, rl, exchanges, shares, sides, flow, role) -> StageKind:  # noqa: ANN001
    return StageKind(explores=explores, trains=trains, from_dataset=from_dataset, rl=rl, exchanges_weights=exchanges,
                     shares_devices=shares, sides=sides, flow=flow, tracking_role=role)


@pytest.mark.parametrize("mode", list(KINDS))
def test_each_mode_is_its_kind(mode: str) -> None:
    kind = stage_kind(SMOKE.with_overrides({"mode": mode}))
    assert kind == _kind(*KINDS[mode])
    assert kind.keeps_ledger == kind.trains  # colocate included: it runs flows/rl.py, which keeps the ledger
    assert kind.together == (mode in ("both", "colocate"))


def test_a_train_stage_without_rollouts_learns_from_a_dataset() -> None:
    """sft and dpo in mode train: the SFT flow, no weights traded, engines only to evaluate (when it has eval sets)."""
    sft, rl = load_recipe("arith").resolve_stages()
    assert (sft.mode, sft.algorithm.algorithm_type) == ("train", "sft") and sft.buffer.explorer_input.eval_tasksets
    assert stage_kind(sft) == _kind(False, True, True, False, False, False, ET, "sft", "main")
    assert stage_kind(sft.with_overrides({"buffer.explorer_input.eval_tasksets": []})).sides == T
    assert stage_kind(rl).rl and stage_kind(rl).flow == "both"
    dpo = load_recipe("arith-dpo").resolve_stages()[-1]
    assert (dpo.mode, dpo.algorithm.algorithm_type) == ("train", "dpo")
    assert stage_kind(dpo).from_dataset and not stage_kind(dpo).rl and stage_kind(dpo).flow == "sft"
    assert stage_kind(dpo).keeps_ledger and not stage_kind(dpo).exchanges_weights


def test_an_unknown_algorithm_is_neither_rl_nor_a_dataset() -> None:
    """Rules ask the kind before the unknown algorithm_type is reported (its own error): no KeyError."""
    stand_in = SimpleNamespace(mode="train", algorithm=SimpleNamespace(algorithm_type="no-such-algorithm"),
                               buffer=SMOKE.buffer)  # what validation sees before the algorithm rules ran
    kind = stage_kind(stand_in)  # type: ignore[arg-type]
    assert kind.trains and not kind.rl and not kind.from_dataset and kind.flow == "train"


def test_colocate_is_warned_about_as_mode_both_is() -> None:
    """Colocate runs flows/rl.py: it keeps the usage ledger (a budget stops it) and streams its own experiences."""
    budget = {"budget.max_wall_minutes": 30}
    colocate, both = (SMOKE.with_overrides({"mode": mode, **budget}) for mode in ("colocate", "both"))
    assert not [w for w in colocate.warnings + both.warnings if w.startswith("budget.")]
    explore = SMOKE.with_overrides({"mode": "explore", **budget})
    assert any(w.startswith("budget.max_wall_minutes: only a stage that trains (mode 'both', 'colocate' or 'train')")
               for w in explore.warnings)
    stored = {"buffer.trainer_input.experience_buffer.storage_type": "sqlite", "buffer.trainer_input.experience_buffer.path": "x.db"}
    colocate = SMOKE.with_overrides({"mode": "colocate", **stored})
    assert any(w.startswith("buffer.trainer_input.experience_buffer.path: not used: in an RL mode") for w in colocate.warnings)


# Modules whose `mode` is something else: rec's clipping mode, a benchmark's variant.
NOT_THE_CONFIG = ("algorithms/policy_loss/rec.py", "benchmarks/")


def mode_questions(tree: ast.AST) -> list[int]:
    """Lines that compare an object's `.mode` (==, !=, in, not in) or look a table up by it."""
    def is_mode(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "mode"

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            if any(is_mode(n) for n in (node.left, *node.comparators)):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and is_mode(node.slice) and isinstance(node.ctx, ast.Load):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and is_mode(node.args[0])):
            lines.append(node.lineno)
    return lines


def test_the_finder_sees_each_way_of_asking() -> None:
    code = ("a = c.mode == 'both'\nb = c.mode in TRAINING\nd = 'x' != r.config.mode\ne = ROLE.get(c.mode, 'main')\n"
            "f = SIDES[c.mode]\ng = c.mode is None\nh = loss_agg_mode == 'x'\ni = mode == 'ring'\n")
    assert mode_questions(ast.parse(code)) == [1, 2, 3, 4, 5]


def test_no_module_but_the_stage_kind_asks_the_mode_itself() -> None:
    """Which sides run, whether it trains or explores, the ledger, the flow, the tracking role: only
    schemas/stage_kind.py reads them off `mode`; everything else asks `stage_kind(config)`."""
    found = []
    tops = [p for p in ROOT.iterdir() if not p.name.startswith(".") and p.name != "tests"]  # .venv, .rft: not ours
    for path in sorted(f for top in tops for f in ([top] if top.suffix == ".py" else top.rglob("*.py") if top.is_dir() else [])):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "schemas/stage_kind.py" or rel.startswith(NOT_THE_CONFIG):
            continue
        found += [f"{rel}:{line}" for line in mode_questions(ast.parse(path.read_text(encoding="utf-8")))]
    assert found == []
