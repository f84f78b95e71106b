"""TensorBoard: event files in {experiment_dir}/log/tensorboard/<role> (`tensorboard --logdir` on that folder)."""

from __future__ import annotations

from typing import Any

from checkpointing import layout
from checkpointing.layout import experiment_dir
from tracking.base import WriterMonitor


class TensorBoardMonitor(WriterMonitor):
    name = "tensorboard"

    def open(self, role: str) -> Any:
        from torch.utils.tensorboard import SummaryWriter  # torch's writer: no TensorFlow needed

        return SummaryWriter(log_dir=str(layout.log_dir(experiment_dir(self.config)) / "tensorboard" / role))

    def close(self, writer: Any, failed: bool) -> None:
        writer.close()

    def where(self, writer: Any) -> str:
        return str(writer.log_dir)

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        writer = self.writer(run_id)
        for key, value in metrics.items():
            writer.add_scalar(key, float(value), step)
        writer.flush()

    def log_table(self, run_id: str, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """As a markdown table in the Text tab (TensorBoard has no table type)."""
        columns = list(rows[0]) if rows else []
        cells = [[str(row[c]).replace("|", "/").replace("\n", " ") for c in columns] for row in rows]
        table = "\n".join(["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|",
                           *("| " + " | ".join(row) + " |" for row in cells)])
        self.writer(run_id).add_text(f"eval/{name}", table, step)
