"""`rft compare RECIPE|FILE --variant PATH=VALUE[;PATH=VALUE] --variant ...`: the `compare` flow here; prints
the comparison table and which variant won on which held-out metric."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table

from cli.validate import AllowUnsupported, SetOption, Target, err_console, load_or_exit
from schemas import UnknownSettingError, parse_set_args

VariantOption = Annotated[list[str], typer.Option("--variant", help="One variant's settings, 'path=value;path=value'; give two or more.")]


def compare_command(target: Target, variant: VariantOption, set_: SetOption = None,
                    allow_unsupported: AllowUnsupported = False) -> None:
    """Run a recipe once per variant (same seeds and data) and compare them (MLflow and Prefect artifacts)."""
    config = load_or_exit(target, set_, allow_unsupported)
    variants = []
    for item in variant:
        try:
            overrides = parse_set_args([part for part in item.split(";") if part.strip()])
            config.with_overrides(overrides)  # a bad variant fails here, before anything runs
        except (ValueError, UnknownSettingError) as err:
            err_console.print(f"[bold red]--variant {item!r}[/]: {err}")
            raise typer.Exit(2) from None
        variants.append(overrides)
    if len(variants) < 2:
        err_console.print("[bold red]give two or more --variant[/]")
        raise typer.Exit(2)
    from flows.compare import compare  # Prefect, Ray and torch: once the variants are valid

    outcome = compare(config=config, variants=variants)
    console = Console()
    rows = outcome["rows"]
    table = Table(title=f"{config.project}/{config.name}: comparison")  # a column per variant: they stay readable
    table.add_column("")
    for row in rows:
        table.add_column(row["variant"])
    for key in dict.fromkeys(k for row in rows for k in row if k != "variant"):
        table.add_row(key, *(str(row.get(key, "")) for row in rows))
    console.print(table)
    console.print(Markdown(outcome["verdict"]))
