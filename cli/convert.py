"""`rft convert --checkpoint-dir DIR [--base-model-dir DIR] [--export-adapter]`: run the `convert` flow here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from checkpointing.layout import DEFAULT_MAX_SHARD_SIZE, find_step_dirs
from cli.progress import count_bar


def convert(
    checkpoint_dir: Annotated[
        Path,
        typer.Option(
            "--checkpoint-dir",
            exists=True,
            file_okay=False,
            help="An experiment folder (every global_step_N below it), a global_step_N folder or a path inside one.",
        ),
    ],
    base_model_dir: Annotated[
        Path | None,
        typer.Option(
            "--base-model-dir",
            exists=True,
            file_okay=False,
            help="Base model folder: config and tokenizer when a checkpoint has none; base weights of LoRA.",
        ),
    ] = None,
    export_adapter: Annotated[
        bool, typer.Option("--export-adapter", help="Also write a LoRA checkpoint's adapter (peft) to huggingface/lora_adapter/.")
    ] = False,
    max_shard_size: Annotated[
        str, typer.Option("--max-shard-size", help="Largest safetensors file; bigger models are sharded with an index.")
    ] = DEFAULT_MAX_SHARD_SIZE,
) -> None:
    """Merge trainer checkpoints (ours or veRL's FSDP shards) into Hugging Face models, verified by logits."""
    console = Console()
    steps = find_step_dirs(checkpoint_dir)
    if not steps:
        Console(stderr=True).print(f"[red]error[/]: no global_step_N folder in {checkpoint_dir}")
        raise typer.Exit(1)
    from flows.convert import convert as convert_flow  # imports Prefect and torch: only once there is work
    from tasks.convert import LISTENERS

    bar = count_bar(console, "{task.fields[last]}")
    bar_task = bar.add_task("convert", total=len(steps), last="")

    def on_result(result: dict) -> None:
        bar.update(bar_task, advance=1, last=f"{result['step']} {'skipped' if result['skipped'] else 'converted'}")

    LISTENERS.append(on_result)
    try:
        with bar:
            results = convert_flow(
                checkpoint_dir=str(checkpoint_dir),
                base_model_dir=str(base_model_dir) if base_model_dir else None,
                export_adapter=export_adapter,
                max_shard_size=max_shard_size,
            )
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]error[/]: {exc}", highlight=False)
        raise typer.Exit(1) from None
    finally:
        LISTENERS.remove(on_result)
    console.rule("converted")
    console.print_json(json.dumps(results, default=str))
