"""Save the trained policy as a Hugging Face folder that transformers and vLLM load."""

from __future__ import annotations

import shutil
from pathlib import Path

import ray
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends.trainer_actor import get_trainer
from schemas import ExperimentConfig
from tasks.runtime import experiment_id

# Everything of the base model's folder but its weights: config, tokenizer, chat and generation settings.
HF_SIDE_FILES = ("*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken")


def copy_model_files(base_model_dir: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for pattern in HF_SIDE_FILES:
        for item in base_model_dir.glob(pattern):
            if item.name != "model.safetensors.index.json":
                shutil.copy2(item, target / item.name)


@task(name="save-final-model", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def save_final_model(config: ExperimentConfig, base_model_dir: str) -> str:
    target = config.final_model_dir.resolve()
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    copy_model_files(Path(base_model_dir), tmp)
    ray.get(get_trainer(experiment_id(config)).export_weights.remote(str(tmp)))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)  # complete or absent, never half-written
    get_run_logger().info("final model saved to %s", target)
    return str(target)
