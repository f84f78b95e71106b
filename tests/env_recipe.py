"""One environment recipe run on the tiny model, as the environment tests (frozenlake, sudoku, sciworld, textworld)
each check it: 1 step, every episode in the experience store with its success, steps and the state of each turn,
and the episode metrics in MLflow."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

EPISODES = 2 * 4  # the recipes' 2 tasks a step × 4 episodes a task


def run_env_recipe(name: str, tmp_path: Path, model_path: str, *, max_turns: int,
                   metrics: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Runs recipe `name` for one step and returns its stored experiences, having checked what every environment
    records; `metrics` are further MLflow keys the run must have logged."""
    from mlflow.tracking import MlflowClient

    from checkpointing.layout import BUFFER_DB
    from deployments import load_recipe
    from flows.rft import rft
    from tracking import tracking_uri

    config = load_recipe(name).with_overrides({
        "checkpoint_root_dir": str(tmp_path), "model.model_path": model_path, "buffer.total_steps": 1,
        "explorer.eval_interval": 1, "trainer.save_interval": 1,
        "buffer.explorer_input.eval_tasksets.0.split": "test[:2]",
    })
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 1
    with sqlite3.connect(config.experiment_dir / BUFFER_DB) as db:
        rows = [(step, json.loads(data)) for step, data in db.execute("SELECT train_step, data FROM experiences")]
    assert len(rows) == EPISODES and {step for step, _ in rows} == {1}
    for _, exp in rows:
        info = exp["info"]
        assert 1 <= info["turns"] <= max_turns
        assert len(info["step_states"]) == len(info["turn_spans"]) == info["turns"]
        assert isinstance(info["success"], bool) and info["env_steps"] <= info["turns"]
        assert len(exp["response_mask"]) == len(exp["response_token_ids"])
    client = MlflowClient(tracking_uri=tracking_uri(config))
    eval_name = config.buffer.explorer_input.eval_tasksets[0].name
    for key in ("explore/success_rate", "explore/steps_per_episode", f"eval/{eval_name}/success_rate", *metrics):
        assert client.get_metric_history(outcome["mlflow_run_id"], key), key
    return [exp for _, exp in rows]
