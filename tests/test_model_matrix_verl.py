"""veRL's trainer on each family of checkpointing/tiny_models.py (issue 71): a step, and the weights it publishes
under the names a Hugging Face folder holds, which transformers loads with veRL's own log-probs.

One FSDP rank on CPU per family, no engines: the engines' side of these names (vLLM loading them, every sync
method) runs per family in tests/test_model_matrix.py from the torch trainer's export, whose names these equal.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from buffer.experience import Experience
from checkpointing import tiny_models
from checkpointing.models import resolve_model_path
from deployments import load_recipe
from workflows.render import renderer_for

pytestmark = pytest.mark.slow
SIDE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture(scope="module", params=list(tiny_models.FAMILIES))
def verl_trainer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, object]]:
    import ray

    from backends.policy import policy_for

    family = request.param
    model_dir = str(resolve_model_path(f"{tiny_models.PREFIX}{family}"))
    config = load_recipe("smoke").with_overrides({
        "name": f"verl-matrix-{family}".replace("_", "-"),
        "model.model_path": model_dir,
        "checkpoint_root_dir": str(tmp_path_factory.mktemp("verl-matrix")),
        "cluster.ray_address": "local",
        "trainer.trainer_type": "verl",
        "trainer.cpu_workers": 1,
        "trainer.gradient_checkpointing": False,
        "algorithm.optimizer.lr": 3e-3,
        "algorithm.optimizer.weight_decay": 0.0,
    })
    policy = policy_for(config)
    policy.connect()
    try:
        policy.start_trainer(model_dir, total_steps=10)
        yield family, policy
    finally:
        policy.release()
        ray.shutdown()


def _names(folder: Path) -> set[str]:
    from safetensors import safe_open

    names: set[str] = set()
    for shard in folder.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            names |= set(f.keys())
    return names


def _experience(family: str, model_dir: str) -> Experience:
    renderer = renderer_for(model_dir)
    response = renderer.encode("The answer is 42." + tiny_models.FAMILIES[family].end_of_turn)
    return Experience(eid="t", task_id="t", group_id="g", prompt_token_ids=renderer.render([{"role": "user", "content": "?"}]),
                      response_token_ids=response, logprobs=[0.0] * len(response), reward=1.0, advantage=1.0)


def test_verl_steps_and_publishes_weights_transformers_loads_with_its_logprobs(verl_trainer, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    family, policy = verl_trainer
    model_dir = str(resolve_model_path(f"{tiny_models.PREFIX}{family}"))
    trainer = policy.trainer
    exp = _experience(family, model_dir)
    before = trainer.logprobs([exp])[0]
    for _ in range(3):
        exp.logprobs = trainer.logprobs([exp])[0]
        metrics = trainer.train_step([exp])
        assert math.isfinite(metrics["loss"])
    after = trainer.logprobs([exp])[0]
    assert sum(after) > sum(before) + 0.5, (sum(before), sum(after))  # the steps raised the answer's likelihood

    folder = tmp_path / "published"
    trainer.publish_weights(3, folder)
    # the names of the family's own files, which vLLM loads (a MoE's experts one by one, not transformers' fused)
    assert _names(folder) == _names(Path(model_dir))
    for name in SIDE_FILES:
        if (Path(model_dir) / name).is_file():
            shutil.copy(Path(model_dir) / name, folder / name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = torch.tensor([exp.prompt_token_ids + exp.response_token_ids])
    with torch.no_grad():
        logits = loaded(input_ids=ids).logits[0, len(exp.prompt_token_ids) - 1 : -1]
    theirs = torch.log_softmax(logits, -1).gather(-1, torch.tensor(exp.response_token_ids)[:, None])[:, 0]
    gap = (theirs - torch.tensor(after)).abs().max().item()
    assert gap < 1e-3, f"{family}: the published weights score {gap:.5f} off veRL's own log-probs"
