"""`rft run RECIPE|FILE [--set path=value ...]`: run the `rft` flow here, with a progress bar."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape

from cli.progress import count_bar, failed_note
from cli.validate import AllowUnsupported, SetOption, Target, err_console, load_or_exit
from tracking import progress as step_progress


def run(target: Target, set_: SetOption = None, allow_unsupported: AllowUnsupported = False) -> None:
    """Run an experiment with the local Prefect API (the server of PREFECT_API_URL, else a temporary one)."""
    config = load_or_exit(target, set_, allow_unsupported)
    from flows.rft import rft  # imports Prefect, Ray and torch: only once the config is valid

    console = Console()
    bar = count_bar(console, "reward {task.fields[reward]}")
    bar_task = bar.add_task(f"{config.project}/{config.name}", total=None, reward="-")

    def on_step(step: int, total: int, metrics: dict[str, float]) -> None:
        reward = metrics.get("explore/reward_mean")
        bar.update(bar_task, completed=step, total=total, reward=(f"{reward:.3f}" if reward is not None else "-")
                   + failed_note(metrics.get("explore/tasks_failed_share", 0.0)))

    step_progress.LISTENERS.append(on_step)
    try:
        with bar:
            outcome = rft(config=config)
    except Exception as err:  # Prefect logged the run already: the cause, once
        err_console.print(f"[bold red]{config.project}/{config.name} failed[/]: {escape(cause(err))}")
        raise typer.Exit(1) from None
    finally:
        step_progress.LISTENERS.remove(on_step)
    console.rule("result")
    console.print_json(json.dumps(outcome, default=str))
    from tasks.evaluate import before_label, comparison_text

    for i, (name, summary) in enumerate(outcome.items()):  # what changed, per eval taskset: before beside after
        for taskset, metrics in (summary.get("eval", {}) if isinstance(summary, dict) else {}).items():
            count = f"{int(metrics['pairs'])} held-out pairs" if "pairs" in metrics else f"{int(metrics.get('tasks', 0))} held-out tasks"
            console.rule(f"{name}: {taskset}, {count}")
            console.print(comparison_text(summary.get("eval_at_start", {}).get(taskset), metrics, "after training",
                                          before_label(i)), highlight=False)


def cause(error: BaseException) -> str:
    """The error as a user reads it: a setting's error whole (it names the field or the file); any
    other error's type and first line (its traceback is in the run's log above)."""
    from backends.errors import ConfigError

    if isinstance(error, ConfigError):
        return str(error)
    first = next((line for line in str(error).splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {first}"
