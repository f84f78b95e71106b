"""Write the held-out success of a staged FrozenLake run as one JSON: before training, after the SFT warm-up, after
RL, each with n and its standard error, and what RL added with the standard error of that difference. Run from the
repository root after `rft run frozenlake-learn`:

    .venv/bin/python scripts/frozenlake_learning.py checkpoints/rft/frozenlake-learn \\
        docs/runs-data/2026-12-06_frozenlake-learn.json --command "rft run frozenlake-learn" --wall-s 2400 \\
        [--base-eval base.json] [--final-eval final.json]

It reads the stages' summary.json files (<run>/sft_warmup, <run>/grpo): the `success_rate` and `tasks` of the eval
taskset (greedy) in their `eval_at_start` and `eval`. Before training is the warm-up's `eval_at_start`; after the
warm-up is the RL stage's `eval_at_start` (its engines start on the warm-up's weights), the warm-up's own final
evaluation recorded beside it (each null where the warm-up does not evaluate); after RL is the RL stage's `eval`.
`--base-eval` and `--final-eval` add `rft eval` JSONs (a fresh engine) of the untrained and the final model on the
same maps. A standard error is sqrt(p (1 - p) / n); that of RL's gain is sqrt(se_warmup² + se_rl²), the two
evaluations taken as independent (the same maps both times, so it is conservative). `rl_signal` is true when the
gain is more than twice its standard error.

`paired` reads the RL stage's per-map evaluation tables back from its MLflow run (eval/<taskset>/step_NNNNN.json,
one row per map): held-out success at each evaluated step, and RL's gain as the mean of per-map differences with
its standard error (sd of the differences / sqrt(n)), with how many maps it newly solves and how many it loses.

`scripted_walks` puts the model's numbers beside two walkers that read nothing but the positions, on the recipe's
(`--recipe`) held-out maps with its turns, computed exactly: a random walk (each move 1 in 4), and a walk toward the
goal (a move that shortens the distance to G, 1 in 2 when there are two) that does not see the holes.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from generators import generate
from generators.games import MOVES, find_cell

EVAL = "frozenlake-eval"
Walker = Callable[[tuple[int, int], tuple[int, int]], list[str]]


def random_walk(at: tuple[int, int], goal: tuple[int, int]) -> list[str]:
    return list(MOVES)


def toward_goal(at: tuple[int, int], goal: tuple[int, int]) -> list[str]:
    return [m for m, (dr, dc) in MOVES.items()
            if abs(goal[0] - at[0] - dr) + abs(goal[1] - at[1] - dc) < abs(goal[0] - at[0]) + abs(goal[1] - at[1])]


def walk_success(rows: list[str], max_turns: int, walker: Walker) -> float:
    """The exact probability that `walker` (its moves equally likely) reaches G within max_turns on a non-slippery
    map, as the frozenlake workflow plays it: a hole ends the episode, a move into the edge stays."""
    size, goal = len(rows), find_cell(rows, "G")

    def go(at: tuple[int, int], turns: int) -> float:
        moves = walker(at, goal)
        total = 0.0
        for move in moves:
            r, c = at[0] + MOVES[move][0], at[1] + MOVES[move][1]
            r, c = (r, c) if 0 <= r < size and 0 <= c < size else at
            cell = rows[r][c]
            total += 1.0 if cell == "G" else 0.0 if cell == "H" or turns == 1 else go((r, c), turns - 1)
        return total / len(moves)

    return go(find_cell(rows, "S"), max_turns)


def scripted_walks(recipe: str, eval_name: str = EVAL) -> dict[str, Any]:
    """Held-out success of the random and the toward-the-goal walkers on the recipe's eval maps."""
    from deployments import load_recipe

    config = load_recipe(recipe)
    (taskset,) = [t for t in config.buffer.explorer_input.eval_tasksets if t.name == eval_name]
    maps = [row["map"].split("\n") for row in generate("frozenlake", taskset.generator_args, taskset.split)]
    turns = int(taskset.workflow_args["max_turns"])
    return {"recipe": recipe, "maps": len(maps), "max_turns": turns,
            **{name: sum(walk_success(m, turns, walker) for m in maps) / len(maps)
               for name, walker in (("random_walk", random_walk), ("toward_goal", toward_goal))}}


def point(metrics: dict[str, Any]) -> dict[str, float]:
    """A success rate with its n and standard error (and the steps per episode the evaluation counted)."""
    p, n = float(metrics["success_rate"]), int(metrics["tasks"])
    return {"success_rate": p, "n": n, "successes": round(p * n), "se": math.sqrt(p * (1 - p) / n),
            "steps_per_episode": float(metrics.get("steps_per_episode", 0.0))}


def stage_minutes(summary: dict[str, Any]) -> float | None:
    usage = summary.get("usage", {})
    return round(usage["wall_s"] / 60, 1) if "wall_s" in usage else None


def learning(run: Path, eval_name: str = EVAL) -> dict[str, Any]:
    warmup = json.loads((run / "sft_warmup" / "summary.json").read_text())
    rl = json.loads((run / "grpo" / "summary.json").read_text())
    before = point(warmup["eval_at_start"][eval_name]) if eval_name in warmup.get("eval_at_start", {}) else None
    after_warmup, after_rl = point(rl["eval_at_start"][eval_name]), point(rl["eval"][eval_name])
    gain = after_rl["success_rate"] - after_warmup["success_rate"]
    gain_se = math.sqrt(after_warmup["se"] ** 2 + after_rl["se"] ** 2)
    return {
        "run": run.name,
        "eval_taskset": eval_name,
        "before_training": before,
        "after_warmup": after_warmup,
        "after_warmup_in_warmup_stage": point(warmup["eval"][eval_name]) if eval_name in warmup.get("eval", {}) else None,
        "after_rl": after_rl,
        "warmup_steps": warmup.get("steps"),
        "rl_steps": rl.get("steps"),
        "rl_gain": gain,
        "rl_gain_se": gain_se,
        "rl_gain_over_se": gain / gain_se if gain_se else None,
        "rl_signal": gain > 2 * gain_se,
        "stage_minutes": {"sft_warmup": stage_minutes(warmup), "grpo": stage_minutes(rl)},
    }


def eval_tables(run: Path, eval_name: str = EVAL, tracking_uri: str | None = None) -> dict[int, dict[str, float]]:
    """{step: {map id: success}} of the RL stage's evaluations, from the tables its MLflow run holds."""
    from mlflow.tracking import MlflowClient

    summary = json.loads((run / "grpo" / "summary.json").read_text())
    uri = tracking_uri or f"sqlite:///{run.parent.parent.resolve() / 'mlflow.db'}"  # <root>/<project>/<name>
    client, run_id = MlflowClient(tracking_uri=uri), summary["mlflow_run_id"]
    tables: dict[int, dict[str, float]] = {}
    for item in client.list_artifacts(run_id, f"eval/{eval_name}"):
        step = int(Path(item.path).stem.removeprefix("step_"))
        table = json.loads(Path(client.download_artifacts(run_id, item.path)).read_text())
        rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
        tables[step] = {str(row["task_id"]): float(row["reward"]) for row in rows}
    return dict(sorted(tables.items()))


def paired(tables: dict[int, dict[str, float]]) -> dict[str, Any]:
    """The success curve over RL's evaluations, and the first-to-last gain as a paired difference over maps."""
    first, last = tables[min(tables)], tables[max(tables)]
    maps = sorted(first.keys() & last.keys())
    diffs = [last[m] - first[m] for m in maps]
    n = len(diffs)
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else math.nan
    return {
        "curve": [{"rl_step": step, **{k: v for k, v in point({"success_rate": sum(t.values()) / len(t),
                                                                 "tasks": len(t)}).items() if k != "steps_per_episode"}}
                  for step, t in tables.items()],
        "maps": n, "gain": mean, "gain_se": se, "gain_over_se": mean / se if se else None,
        "maps_solved_newly": sum(d > 0 for d in diffs), "maps_lost": sum(d < 0 for d in diffs),
        "rl_signal": mean > 2 * se,
    }


def rft_eval(path: Path, eval_name: str = EVAL) -> dict[str, Any]:
    """An `rft eval` JSON's model, split, minutes and success on the eval taskset."""
    found = json.loads(path.read_text())
    return {"model": found["model"], "split": found["tasksets"][eval_name]["split"], "minutes": found["minutes"],
            **point(found["eval"][eval_name])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the run's folder: checkpoints/rft/<name>")
    parser.add_argument("output", type=Path, help="the JSON to write")
    parser.add_argument("--command", required=True, help="the command that ran it, as written in the JSON")
    parser.add_argument("--wall-s", type=float, help="the whole run's wall clock in seconds")
    parser.add_argument("--machine", default="", help="the machine, in words (e.g. its tokens/s)")
    parser.add_argument("--base-eval", type=Path, help="`rft eval` JSON of the untrained model")
    parser.add_argument("--final-eval", type=Path, help="`rft eval` JSON of the final model")
    parser.add_argument("--note", default="", help="what to know when reading the numbers")
    parser.add_argument("--tracking-uri", help="the MLflow store [default: sqlite:///<checkpoint root>/mlflow.db]")
    parser.add_argument("--recipe", default="frozenlake-learn", help="the recipe whose eval maps the walkers play")
    args = parser.parse_args()
    result = {"command": args.command, "machine": args.machine, "note": args.note, **learning(args.run),
              "paired": paired(eval_tables(args.run, tracking_uri=args.tracking_uri)),
              "scripted_walks": scripted_walks(args.recipe)}
    for key, path in (("rft_eval_untrained", args.base_eval), ("rft_eval_final", args.final_eval)):
        if path is not None:
            result[key] = rft_eval(path)
    if args.wall_s is not None:
        result["wall_s"] = args.wall_s
        result["wall_minutes"] = round(args.wall_s / 60, 1)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("before_training", "after_warmup", "after_rl", "rl_gain", "rl_gain_se",
                                              "rl_signal", "paired", "scripted_walks")}, indent=2))


if __name__ == "__main__":
    main()
