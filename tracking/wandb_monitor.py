"""Weights & Biases: offline into {experiment_dir}/log/wandb unless WANDB_MODE or WANDB_API_KEY says
otherwise (no network call without a key). Needs the wandb package: validation refuses monitor_type
wandb without it (a `SETTINGS` entry)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from checkpointing import layout
from checkpointing.layout import experiment_dir
from tracking.base import WriterMonitor, experiment_root


class WandbMonitor(WriterMonitor):
    name = "wandb"

    def open(self, role: str) -> Any:
        import wandb

        config = self.config
        folder = experiment_dir(config)
        logs = layout.log_dir(folder)
        logs.mkdir(parents=True, exist_ok=True)
        mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
        slug = "".join(c if c.isalnum() else "-" for c in f"{config.project}-{config.name}-{role}")
        run_id = f"{slug[:40]}-{hashlib.sha1(str(folder).encode()).hexdigest()[:10]}"  # W&B ids are short
        run = wandb.init(
            project=config.monitor.experiment_name or config.project,
            name=config.name if role == "main" else f"{config.name} ({role})",
            group=config.group or experiment_root(config)[0], id=run_id, resume="allow", dir=str(logs), mode=mode,
            config=config.model_dump(mode="json", exclude={"stages"}), reinit="create_new",
        )
        run.define_metric("global_step")
        run.define_metric("*", step_metric="global_step")
        return run

    def close(self, writer: Any, failed: bool) -> None:
        writer.finish(exit_code=1 if failed else 0)

    def where(self, writer: Any) -> str:
        return str(writer.dir)

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        self.writer(run_id).log({**{k: float(v) for k, v in metrics.items()}, "global_step": step})

    def log_table(self, run_id: str, name: str, rows: list[dict[str, Any]], step: int) -> None:
        import wandb

        columns = list(rows[0]) if rows else []
        table = wandb.Table(columns=columns, data=[[row[c] for c in columns] for row in rows])
        self.writer(run_id).log({f"eval/{name}/table": table, "global_step": step})
