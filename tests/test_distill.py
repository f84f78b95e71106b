"""On-policy distillation (algorithm_type on_policy_distill / jsd): the teacher is the first auxiliary model
(explorer.auxiliary_models), a vLLM engine that scores each sampled response; its per-token log-probs make
per-token advantages (algorithms/advantage/distill.py) that every local trainer takes through collate()."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from algorithms import ADVANTAGE_FNS, teacher_advantages
from backends.batch import collate
from buffer.experience import Experience
from buffer.experience_store import ExperienceStore
from deployments import load_recipe
from schemas import ExperimentConfig

BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
TEACHER = {"explorer.auxiliary_models": [{"model_path": BASE, "name": "teacher"}]}


def _exp(eid: str, logprobs: list[float], **fields: object) -> Experience:
    return Experience(eid=eid, task_id="t", group_id="g", prompt_token_ids=[1, 2], response_token_ids=[3] * len(logprobs),
                      logprobs=logprobs, reward=0.0, **fields)  # type: ignore[arg-type]


def test_distill_advantage_is_the_teacher_log_ratio_per_token() -> None:
    student, teacher = [-0.5, -2.0, -0.1], [-0.2, -3.0, -0.1]
    args = ADVANTAGE_FNS.resolve_args("on_policy_distill", {"kl_coef": 2.0})  # as the explorer hands them over
    assert teacher_advantages("on_policy_distill", student, teacher, args) == pytest.approx([0.6, -2.0, 0.0])


def test_jsd_advantage_is_zero_where_they_agree_and_negative_elsewhere() -> None:
    student, teacher = [-0.5, -2.0, -0.1], [-0.5, -0.1, -3.0]
    jsd = teacher_advantages("jsd", student, teacher, ADVANTAGE_FNS.resolve_args("jsd", {"kl_coef": 1.0, "lambda_coef": 0.5}))
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


def test_topk_distill_is_the_forward_kl_from_the_teachers_top_k_and_moves_the_student_to_it() -> None:
    from algorithms import LossInputs, compute_loss
    from schemas.algorithm import AlgorithmConfig

    algorithm = AlgorithmConfig(algorithm_type="on_policy_distill", policy_loss_fn="topk_distill")
    teacher = torch.tensor([[[-0.1, -2.5, -4.0], [-0.7, -0.8, -5.0]]])  # [B=1, T=2, k=3], likeliest first
    q = torch.softmax(teacher, -1)
    logits = torch.zeros((1, 2, 6), requires_grad=True)  # the student over a vocabulary of 6; teacher ids 0, 1, 2
    ids = torch.tensor([[[0, 1, 2], [3, 4, 5]]])

    def loss() -> tuple[torch.Tensor, dict[str, float]]:
        log_probs = torch.log_softmax(logits, -1)
        return compute_loss(algorithm, LossInputs(
            logprobs=log_probs[..., 0], old_logprobs=torch.zeros((1, 2)), advantages=torch.zeros((1, 2)),
            response_mask=torch.ones((1, 2)), teacher_topk_logprobs=teacher, student_topk_logprobs=log_probs.gather(-1, ids)))

    value, metrics = loss()
    by_hand = (q * (q.log() - math.log(1 / 6))).sum(-1).mean()  # a uniform student
    assert value.item() == pytest.approx(by_hand.item(), rel=1e-5) and metrics["topk_kl"] == pytest.approx(by_hand.item(), rel=1e-5)
    optimizer = torch.optim.SGD([logits], lr=1.0)
    for _ in range(300):
        optimizer.zero_grad()
        loss()[0].backward()
        optimizer.step()
    student = torch.softmax(logits, -1).gather(-1, ids).detach()
    assert loss()[1]["topk_kl"] < 0.01 and torch.allclose(student, q, atol=0.05)  # all its mass on the k, shaped as q
    with pytest.raises(ValueError, match="teacher_topk_logprobs"):
        compute_loss(algorithm, LossInputs(logprobs=torch.zeros((1, 2)), old_logprobs=torch.zeros((1, 2)),
                                           advantages=torch.zeros((1, 2)), response_mask=torch.ones((1, 2))))


def test_collate_pads_the_teachers_top_k_and_the_loss_needs_a_teacher() -> None:
    top = {"teacher_topk_ids": [[5, 6], [7, 8]], "teacher_topk_logprobs": [[-0.1, -2.0], [-0.3, -1.5]]}
    batch = collate([_exp("a", [-1.0, -1.0], advantage=0.0, **top),
                     _exp("b", [-1.0], advantage=0.0, teacher_topk_ids=[[9, 10]], teacher_topk_logprobs=[[-0.2, -1.0]])],
                    pad_token_id=0)
    assert batch.teacher_topk_ids is not None and batch.teacher_topk_ids.tolist() == [[[5, 6], [7, 8]], [[9, 10], [0, 0]]]
    assert batch.teacher_topk_logprobs is not None and batch.teacher_topk_logprobs[1, 0].tolist() == pytest.approx([-0.2, -1.0])
    assert collate([_exp("c", [-1.0], advantage=0.0)], pad_token_id=0).teacher_topk_ids is None
    with pytest.raises(ValueError, match="teacher_topk_ids"):
        _exp("d", [-1.0, -1.0], teacher_topk_ids=[[1, 2]], teacher_topk_logprobs=[[-0.1, -2.0]])

    base = {"stages": [], "algorithm.algorithm_type": "on_policy_distill", "algorithm.policy_loss_fn": "topk_distill",
            **TEACHER}
    config = load_recipe("arith").with_overrides({**base, "algorithm.policy_loss_fn_args": {"topk": 8}})
    assert config.algorithm.policy_loss_fn_args["topk"] == 8
    for overrides, path, says in [
        ({"algorithm.algorithm_type": "grpo"}, "algorithm.policy_loss_fn", "on_policy_distill"),
        ({"algorithm.policy_loss_fn_args": {"topk": 50}}, "topk", "20"),
        ({"trainer.trainer_type": "verl"}, "algorithm.policy_loss_fn", "veRL"),
    ]:
        with pytest.raises(ValidationError) as info:
            load_recipe("arith").with_overrides({**base, **overrides})
        assert path in str(info.value) and says in str(info.value), str(info.value)


def test_tinker_refuses_a_teacher_naming_why() -> None:
    with pytest.raises(ValidationError) as info:
        load_recipe("gsm8k-tinker").with_overrides({"algorithm.algorithm_type": "on_policy_distill", **TEACHER})
    text = str(info.value)
    assert "explorer.auxiliary_models" in text and "service" in text


@pytest.mark.slow
@pytest.mark.full  # a whole run with a teacher engine, ~4 min: scripts/test.sh --full (CI's 90 minutes are full)
def test_a_distillation_run_scores_every_sample_with_the_teacher(tmp_path: Path) -> None:
    """With the loss over the teacher's top 4 (topk_distill), which needs every score.

    The teacher here is the student's own starting model (the one model CI has): at temperature 1 its
    log-probs of each sampled token must equal the sampling log-probs, token by token. A shift by one
    position, or a teacher scoring another prompt, would be far off."""
    from flows.rft import rft

    config: ExperimentConfig = load_recipe("arith").with_overrides({
        "name": "distill", "checkpoint_root_dir": str(tmp_path), "stages": [],
        "algorithm.algorithm_type": "on_policy_distill", "algorithm.repeat_times": 2, **TEACHER,
        "algorithm.policy_loss_fn": "topk_distill", "algorithm.policy_loss_fn_args": {"topk": 4},
        "buffer.batch_size": 4, "buffer.total_steps": 2, "explorer.eval_on_startup": False,
        "buffer.explorer_input.eval_tasksets": [], "trainer.save_interval": 2, "model.max_response_tokens": 24,
    })
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 2
    with ExperienceStore.for_experiment(config.experiment_dir) as store:
        rows = store.experiences()
    assert len(rows) == 16  # 2 steps of 4 tasks x 2 samples
    # The loss over the top 4 moves the student off its teacher at once (it pulls in the mass outside the 4), so
    # the samples of the starting weights (model version 0) are the ones the teacher's scores must equal.
    first = [e for e in rows if e.model_version == 0]
    assert len(first) >= 8
    gaps = [abs(s - t) for e in first for s, t in zip(e.logprobs, e.teacher_logprobs or [], strict=True)]
    assert len(gaps) == sum(len(e.response_token_ids) for e in first)
    assert max(gaps) < 0.05, max(gaps)
    for e in rows:
        assert e.token_advantages is not None and len(e.token_advantages) == len(e.response_token_ids)
        assert math.isclose(e.advantage or 0.0, sum(e.token_advantages) / len(e.token_advantages), abs_tol=1e-9)
    assert torch.tensor([abs(a) for e in first for a in e.token_advantages or []]).max() < 0.05
    for e in rows:  # topk_distill's teacher scores: its 4 likeliest tokens at each position, likeliest first
        assert e.teacher_topk_ids is not None and e.teacher_topk_logprobs is not None
        assert [len(ids) for ids in e.teacher_topk_ids] == [4] * len(e.response_token_ids)
        for given, top in zip(e.teacher_logprobs or [], e.teacher_topk_logprobs, strict=True):
            assert top == sorted(top, reverse=True) and top[0] >= given - 1e-4
