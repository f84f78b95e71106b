"""On-policy distillation (algorithm_type on_policy_distill / jsd): the teacher is the first auxiliary model
(explorer.auxiliary_models), a vLLM engine that scores each sampled response; its per-token log-probs make
per-token advantages (algorithms/advantage/distill.py) that every local trainer takes through collate()."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from algorithms import teacher_advantages
from backends.batch import collate
from buffer.experience import Experience
from checkpointing.layout import BUFFER_DB
from deployments import load_recipe
from schemas import ExperimentConfig

BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
TEACHER = {"explorer.auxiliary_models": [{"model_path": BASE, "name": "teacher"}]}


def _exp(eid: str, logprobs: list[float], **fields: object) -> Experience:
    return Experience(eid=eid, task_id="t", group_id="g", prompt_token_ids=[1, 2], response_token_ids=[3] * len(logprobs),
                      logprobs=logprobs, reward=0.0, **fields)  # type: ignore[arg-type]


def test_distill_advantage_is_the_teacher_log_ratio_per_token() -> None:
    student, teacher = [-0.5, -2.0, -0.1], [-0.2, -3.0, -0.1]
    assert teacher_advantages("on_policy_distill", student, teacher, {"kl_coef": 2.0}) == pytest.approx([0.6, -2.0, 0.0])


def test_jsd_advantage_is_zero_where_they_agree_and_negative_elsewhere() -> None:
    student, teacher = [-0.5, -2.0, -0.1], [-0.5, -0.1, -3.0]
    jsd = teacher_advantages("jsd", student, teacher, {"kl_coef": 1.0, "lambda_coef": 0.5})
    assert jsd[0] == pytest.approx(0.0, abs=1e-9)
    assert jsd[1] < 0 and jsd[2] < 0
    with pytest.raises(ValueError, match="2 teacher"):
        teacher_advantages("jsd", student, teacher[:2], {})


def test_collate_takes_per_token_advantages_and_experiences_check_their_length() -> None:
    batch = collate([_exp("a", [-1.0, -1.0], token_advantages=[0.5, -0.25], advantage=0.125),
                     _exp("b", [-1.0], advantage=1.0)], pad_token_id=0)
    assert batch.advantages.tolist() == [[0.5, -0.25], [1.0, 0.0]]
    with pytest.raises(ValueError, match="teacher_logprobs"):
        _exp("c", [-1.0, -1.0], teacher_logprobs=[-1.0])


def test_distill_needs_a_teacher_and_a_backend_that_takes_one() -> None:
    config = load_recipe("arith").with_overrides({"stages": [], "algorithm.algorithm_type": "on_policy_distill", **TEACHER})
    assert config.algorithm.advantage_fn == "on_policy_distill" and config.explorer.auxiliary_models[0].auxiliary_name() == "teacher"
    for overrides, path, says in [
        ({}, "explorer.auxiliary_models", "teacher"),  # no auxiliary model
        ({**TEACHER, "algorithm.kl_penalty_fn": "k1", "algorithm.kl_penalty_fn_args": {"kl_coef": 0.1}},
         "algorithm.kl_penalty_fn", "not from rewards"),
    ]:
        with pytest.raises(ValidationError) as info:
            load_recipe("arith").with_overrides({"stages": [], "algorithm.algorithm_type": "on_policy_distill", **overrides})
        assert path in str(info.value) and says in str(info.value), str(info.value)


def test_tinker_refuses_a_teacher_naming_why() -> None:
    with pytest.raises(ValidationError) as info:
        load_recipe("gsm8k-tinker").with_overrides({"algorithm.algorithm_type": "on_policy_distill", **TEACHER})
    text = str(info.value)
    assert "explorer.auxiliary_models" in text and "service" in text


@pytest.mark.slow
@pytest.mark.full  # a whole run with a teacher engine, ~4 min: scripts/test.sh --full (CI's 90 minutes are full)
def test_a_distillation_run_scores_every_sample_with_the_teacher(tmp_path: Path) -> None:
    """The teacher here is the student's own starting model (the one model CI has): at temperature 1 its
    log-probs of each sampled token must equal the sampling log-probs, token by token. A shift by one
    position, or a teacher scoring another prompt, would be far off."""
    from flows.rft import rft

    config: ExperimentConfig = load_recipe("arith").with_overrides({
        "name": "distill", "checkpoint_root_dir": str(tmp_path), "stages": [],
        "algorithm.algorithm_type": "on_policy_distill", "algorithm.repeat_times": 2, **TEACHER,
        "buffer.batch_size": 4, "buffer.total_steps": 2, "explorer.eval_on_startup": False,
        "buffer.explorer_input.eval_tasksets": [], "trainer.save_interval": 2, "model.max_response_tokens": 24,
    })
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 2
    with sqlite3.connect(config.experiment_dir / BUFFER_DB) as db:
        rows = [Experience(**json.loads(data)) for (data, ) in db.execute("SELECT data FROM experiences")]
    assert len(rows) == 16  # 2 steps of 4 tasks x 2 samples
    gaps = [abs(s - t) for e in rows for s, t in zip(e.logprobs, e.teacher_logprobs or [], strict=True)]
    assert len(gaps) == sum(len(e.response_token_ids) for e in rows)
    assert max(gaps) < 0.05, max(gaps)
    for e in rows:
        assert e.token_advantages is not None and len(e.token_advantages) == len(e.response_token_ids)
        assert math.isclose(e.advantage or 0.0, sum(e.token_advantages) / len(e.token_advantages), abs_tol=1e-9)
    assert torch.tensor([abs(a) for e in rows for a in e.token_advantages or []]).max() < 0.05
