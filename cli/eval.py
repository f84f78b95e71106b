"""`rft eval MODEL [--recipe RECIPE[:N]] [--split ...] [--repeat K]`: evaluate any model folder the way a run
evaluates its model (the recipe's eval tasksets, the same workflow and metrics), print a table, write JSON.

    rft eval checkpoints/rft/gsm8k/final/huggingface                     # gsm8k's held-out problems
    rft eval HuggingFaceTB/SmolLM2-135M-Instruct --recipe arith           # the untrained model on arith
    rft eval MODEL --recipe gsm8k --split 'test[:200]' --repeat 4 --temperature 1   # mean@4, pass@4
    rft eval MODEL --recipe my_run.yaml:1 --compare before.json          # eval taskset 1 of a config file
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress

from cli.progress import count_bar
from cli.validate import SetOption, err_console, load_or_exit
from schemas import ExperimentConfig

ModelArg = Annotated[str, typer.Argument(
    help="A Hugging Face model folder (e.g. checkpoints/rft/gsm8k/final/huggingface) or a model id the runtime "
    "resolves offline (HuggingFaceTB/SmolLM2-135M-Instruct).", show_default=False)]
RecipeOpt = Annotated[str, typer.Option(
    "--recipe", "--taskset", "-r",
    help="Recipe name or config file (.yaml/.json/.py) whose eval tasksets to run; RECIPE:N runs only eval taskset N. "
    "Its engine settings are used too.")]


def eval_command(
    model: ModelArg,
    recipe: RecipeOpt = "gsm8k",
    split: Annotated[str | None, typer.Option(help="Split to evaluate instead of the taskset's, e.g. 'test[:200]'.")] = None,
    repeat: Annotated[int | None, typer.Option(min=1, help="Samples per task (k of mean@k and pass@k).")] = None,
    temperature: Annotated[float | None, typer.Option(min=0, help="Sampling temperature (0: greedy).")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Longest response in tokens.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Where to write the results as JSON [default: eval-{taskset}.json here].")] = None,
    compare: Annotated[Path | None, typer.Option(
        help="An earlier `rft eval` JSON, or a run's summary.json (its values before training), to show beside.")] = None,
    set_: SetOption = None,
) -> None:
    """Evaluate a model on a recipe's held-out tasks: strict / lenient accuracy, format rate, response length."""
    target, _, index = recipe.rpartition(":") if _has_index(recipe) else (recipe, "", "")
    config = load_or_exit(target, set_, allow_unsupported=True)
    try:
        config = eval_config(config, model, int(index) if index else None, split, repeat, temperature, max_tokens)
    except (ValueError, IndexError) as exc:
        err_console.print(f"[bold red]{recipe}[/]: {exc}")
        raise typer.Exit(1) from None
    if compare and not compare.is_file():
        err_console.print(f"[bold red]--compare {compare}[/]: no such file")
        raise typer.Exit(1)
    baseline = _read_compare(compare) if compare else {}

    started = time.perf_counter()
    bar = count_bar(err_console, "tasks")
    with bar:
        results = evaluate_model(config, bar)
    minutes = (time.perf_counter() - started) / 60

    out = Console(highlight=False)
    from tasks.evaluate import comparison_text

    for result in results:
        out.rule(f"{result['name']}: {model}")
        before = baseline.get(result["name"])
        if before is None and compare:
            err_console.print(f"[yellow]warning[/]: {compare} has no results for {result['name']}")
        if before:
            label = "before training" if _is_summary(compare) else compare.name
            out.print(comparison_text(before, result["metrics"], "this model", label))
        else:
            out.print(_single(result["metrics"]))
    path = output or Path(f"eval-{results[0]['name'] if len(results) == 1 else config.name}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "model": config.model.model_path,
        "recipe": recipe,
        "eval": {r["name"]: r["metrics"] for r in results},
        "tasksets": {r["name"]: ts.model_dump(mode="json", exclude_defaults=True)
                     for r, ts in zip(results, config.buffer.explorer_input.eval_tasksets, strict=True)},
        "rows": {r["name"]: r["rows"] for r in results},
        "minutes": round(minutes, 2),
    }, indent=2))
    out.print(f"\nwrote {path} ({minutes:.1f} min)")


def _has_index(recipe: str) -> bool:
    head, sep, tail = recipe.rpartition(":")
    return bool(sep and head and tail.isdigit())


def eval_config(config: ExperimentConfig, model: str, index: int | None, split: str | None, repeat: int | None,
                temperature: float | None, max_tokens: int | None) -> ExperimentConfig:
    """`config` serving `model`, with only the chosen eval tasksets, changed as asked. Its own experiment
    name, so its engines never meet a run's."""
    tasksets = config.buffer.explorer_input.eval_tasksets
    if not tasksets:
        raise ValueError("has no eval tasksets (buffer.explorer_input.eval_tasksets)")
    chosen = range(len(tasksets)) if index is None else [index]
    if index is not None and not 0 <= index < len(tasksets):
        raise IndexError(f"has {len(tasksets)} eval taskset(s) (0..{len(tasksets) - 1}); asked for {index}")
    local = Path(model).expanduser()
    overrides: dict[str, Any] = {
        "model.model_path": str(local.resolve()) if local.is_dir() else model,
        "name": f"{config.name}-eval-{os.getpid()}",
        "stages": [],
    }
    if max_tokens is not None:
        overrides["model.max_response_tokens"] = max_tokens
    config = config.with_overrides(overrides)
    data = config.user_data()["buffer"]["explorer_input"]["eval_tasksets"]
    kept = []
    for i in chosen:
        taskset = dict(data[i])
        if split is not None:
            taskset["split"] = split
        if repeat is not None:
            taskset["repeat_times"] = repeat
        rollout = dict(taskset.get("rollout_args") or {})
        if temperature is not None:
            rollout["temperature"] = temperature
        if max_tokens is not None:
            rollout["max_tokens"] = max_tokens
        taskset["rollout_args"] = rollout
        kept.append(taskset)
    return config.with_overrides({"buffer.explorer_input.eval_tasksets": kept})


def evaluate_model(config: ExperimentConfig, bar: Progress) -> list[dict[str, Any]]:
    """Start the policy's engines on the config's model, evaluate every eval taskset, stop them; `bar` gets a line
    per taskset that counts its tasks as they end."""
    from backends.policy import policy_for
    from checkpointing.models import resolve_model_path
    from tasks.evaluate import evaluate_tasks

    policy = policy_for(config)
    policy.connect()
    policy.check_requirements()
    try:
        policy.start_engines(str(resolve_model_path(config.model.model_path)))
        results = []
        for taskset in config.buffer.explorer_input.eval_tasksets:
            line = bar.add_task(taskset.name, total=None)
            results.append(evaluate_tasks(config, taskset, step=0, on_task_done=lambda done, total, line=line:
                                          bar.update(line, completed=done, total=total)))
        return results
    finally:
        policy.release()


def _single(metrics: dict[str, float]) -> str:
    from tasks.evaluate import comparison_rows

    rows = comparison_rows(None, metrics, "value")
    width = max(len(r["metric"]) for r in rows)
    return "\n".join(f"{r['metric'].ljust(width)}  {r['value']}" for r in rows)


def _is_summary(path: Path) -> bool:
    return "eval_at_start" in json.loads(path.read_text())


def _read_compare(path: Path) -> dict[str, dict[str, float]]:
    """{taskset: metrics} of an `rft eval` JSON ("eval") or a run's summary.json ("eval_at_start")."""
    data = json.loads(path.read_text())
    if "eval_at_start" in data:
        return data["eval_at_start"]
    return data.get("eval", {})
