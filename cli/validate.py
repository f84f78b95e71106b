"""`rft validate RECIPE|FILE`: print the resolved config of every stage, or every error, exit 1 on errors."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from deployments import RECIPES, UnknownRecipeError, load_any
from schemas import ConfigRuleError, ExperimentConfig, TrinityImportError, UnknownSettingError, describe_errors, parse_set_args

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def load_or_exit(target: str, overrides: list[str] | None, allow_unsupported: bool) -> ExperimentConfig:
    """Load `target`, apply `--set` overrides; on any problem print it (stderr) and exit with code 1."""
    try:
        config, unsupported = load_any(target)
        if unsupported:
            level = "warning" if allow_unsupported else "error"
            style = "yellow" if allow_unsupported else "red"
            for item in unsupported:
                path, _, why = item.partition(": ")
                err_console.print(f"[{style}]{level}[/]: {target}: {path}: {why or 'not supported by this project'}")
            if not allow_unsupported:
                print_warnings(target, config)  # the keys that would be imported but have no effect, too
                err_console.print("Remove these settings, or pass --allow-unsupported to leave them out.")
                raise typer.Exit(1)
        if overrides:
            config = config.with_overrides(parse_set_args(overrides))
        return config
    except ValidationError as exc:
        _print_errors(target, describe_errors(exc))
    except ConfigRuleError as exc:
        _print_errors(target, [f"{p}: {m}" for p, m in exc.problems])
    except (UnknownRecipeError, UnknownSettingError, TrinityImportError, FileNotFoundError, ValueError, TypeError) as exc:
        _print_errors(target, [str(exc)])
    raise typer.Exit(1)


def _print_errors(target: str, lines: list[str]) -> None:
    err_console.print(f"[bold red]{target}: {len(lines)} error(s)[/]")
    for line in lines:
        err_console.print(f"  [red]✗[/] {escape(line)}", soft_wrap=True)


# The arguments every command that loads an experiment takes (validate, run).
Target = Annotated[str, typer.Argument(help=(
    f"Recipe name ({', '.join(RECIPES)}) or a .yaml (Trinity), .json or .py file. A .py recipe is Python code: "
    "it runs, with your permissions, as it is loaded (validate included); use only files you trust. YAML and JSON "
    "are data and run nothing."))]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override one setting: dotted.path=value (repeatable), e.g. algorithm.optimizer.lr=2e-6."),
]
AllowUnsupported = Annotated[
    bool, typer.Option("--allow-unsupported", help="Ignore Trinity settings this project does not support.")
]


Check = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Also run the pre-flight of `rft run`, starting nothing: the cluster's address, the model, every "
        "taskset, the checkpoint folder and MLflow answer or load.",
    ),
]


def validate(
    target: Target, set_: SetOption = None, allow_unsupported: AllowUnsupported = False, check: Check = False
) -> None:
    """Validate an experiment and print the resolved config of each stage as JSON."""
    config = load_or_exit(target, set_, allow_unsupported)
    if check:
        preflight_or_exit(target, config)
        return
    out = Console(highlight=False)
    stages = config.resolve_stages()
    for i, stage in enumerate(stages):
        title = f"stage {i + 1}/{len(stages)}: {stage.name} (mode {stage.mode})"
        out.rule(title)
        out.print_json(json.dumps(stage.model_dump(mode="json")))
        out.print(f"backend: trainer {stage.trainer.trainer_type!r}, rollout {stage.explorer.rollout_model.engine_type!r}"
                  + "".join(f" ({why})" for path, why in stage.derived.items() if path == "trainer.trainer_type"))
        for warning in stage.warnings:
            err_console.print(f"[yellow]warning[/]: {warning}")
    out.print(f"[green]✓[/] {target}: valid ({len(stages)} stage{'s' if len(stages) > 1 else ''})")


def print_warnings(target: str, config: ExperimentConfig) -> None:
    """Every setting that has no effect, of the config and of each of its stages, once each."""
    seen: set[str] = set()
    for stage in [config, *(config.resolve_stages() if config.stages else [])]:
        for warning in stage.warnings:
            line = warning if stage is config else f"stage {stage.name.rsplit('/', 1)[-1]}: {warning}"
            if warning not in seen:
                seen.add(warning)
                err_console.print(f"[yellow]warning[/]: {target}: {line}")


def preflight_or_exit(target: str, config: ExperimentConfig) -> None:
    """The pre-flight of every stage (the preflight package): a line per check, or every problem and exit 1."""
    import datasets

    from backends.errors import ConfigError
    from backends.policy import policy_for
    from preflight import PreflightError, preflight  # imports transformers and datasets

    datasets.disable_progress_bars()
    out = Console(highlight=False, soft_wrap=True)
    problems: list[str] = []
    for stage in config.resolve_stages():
        try:  # the devices the config needs (a running cluster is joined to count them; nothing starts)
            for line in policy_for(stage).check_requirements():
                out.print(f"  [green]✓[/] {escape(stage.name)}: {escape(line)}")
        except (ConfigError, NotImplementedError) as err:
            problems.append(f"{stage.name}: {err}")
        try:
            for line in preflight(stage):
                out.print(f"  [green]✓[/] {escape(stage.name)}: {escape(line)}")
        except PreflightError as err:
            problems += [f"{stage.name}: {p}" for p in err.problems]
    if problems:
        _print_errors(target, list(dict.fromkeys(problems)))
        raise typer.Exit(1)
    out.print(f"[green]✓[/] {target}: ready to run")
