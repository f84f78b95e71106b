"""`rft import-trinity FILE.yaml [--output recipe.py]`: a Trinity-RFT YAML as our config (JSON or a recipe)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from cli.validate import load_or_exit, print_warnings
from schemas.trinity.recipe_source import recipe_source


def import_trinity_command(
    file: Annotated[Path, typer.Argument(help="Trinity-RFT config (.yaml); ${oc.env:VAR,default} is resolved.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write a Python recipe here instead of printing JSON.")
    ] = None,
    allow_unsupported: Annotated[
        bool, typer.Option("--allow-unsupported", help="Drop (and list) settings this project does not support.")
    ] = False,
) -> None:
    """Import a Trinity-RFT YAML. Keys we do not have, or that map onto a setting the runtime refuses, are
    listed and fail the import unless --allow-unsupported (then they are left out); keys that map onto a
    setting without effect are listed as warnings."""
    if file.suffix.lower() not in (".yaml", ".yml"):
        Console(stderr=True).print(f"[red]{file}: expected a .yaml file[/]")
        raise typer.Exit(1)
    config = load_or_exit(str(file), None, allow_unsupported)
    print_warnings(str(file), config)
    if output is None:
        Console(highlight=False).print_json(json.dumps(config.user_data()))
        return
    name = output.stem.replace("_", "-")
    output.write_text(recipe_source(config, source=str(file), recipe_name=name), encoding="utf-8")
    Console(stderr=True).print(f"[green]✓[/] wrote {output} (validate it: rft validate {output})")
