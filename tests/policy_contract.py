"""The backend contract: what every policy (its TrainerBackend and RolloutEngines) must do.

Each check drives a started policy through the `Policy` interface only, so the local (vLLM + torch),
Tinker and veRL backends run the very same assertions (see tests/test_policy_contract.py and the
backends' own test modules):

- a train step changes the trainer's logprobs of the batch it trained on, and counts the step;
- weights the trainer publishes and the engines load change what the engines sample (trained
  toward a target answer, an engine answers it greedily) and stamp the engines' model version;
- a checkpoint round trip restores the weights exactly, and training on from it repeats the same step.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

from backends.policy import Policy
from backends.rollout import SamplingSettings
from buffer.experience import Experience
from workflows.render import ChatRenderer

QUESTION = [{"role": "user", "content": "What is the answer?"}]
TARGET = "The answer is 42."


def target_experience(renderer: ChatRenderer, eid: str = "contract-0") -> Experience:
    """QUESTION answered with TARGET and the end-of-turn token, as the chat template writes it."""
    prompt = renderer.text(QUESTION, add_generation_prompt=True)
    full = renderer.text([*QUESTION, {"role": "assistant", "content": TARGET}], add_generation_prompt=False)
    response = renderer.encode(full[len(prompt):].rstrip("\n"))
    return Experience(
        eid=eid, task_id="contract", group_id="contract", prompt_token_ids=renderer.encode(prompt),
        response_token_ids=response, logprobs=[0.0] * len(response), reward=1.0, advantage=1.0,
    )


def on_policy(policy: Policy, exp: Experience) -> Experience:
    """The experience with the trainer's own current logprobs as the rollout logprobs (ratio 1)."""
    fresh = copy.deepcopy(exp)
    fresh.logprobs = policy.trainer.logprobs([exp])[0]
    return fresh


def check_train_step_changes_logprobs(policy: Policy, renderer: ChatRenderer) -> None:
    exp = on_policy(policy, target_experience(renderer))
    step = policy.trainer.global_step
    metrics = policy.trainer.train_step([exp])
    after = policy.trainer.logprobs([exp])[0]
    assert policy.trainer.global_step == step + 1
    assert math.isfinite(metrics["loss"]) and "grad_norm" in metrics, metrics
    assert len(after) == len(exp.response_token_ids)
    # a positive advantage on the target raised its likelihood
    assert sum(after) > sum(exp.logprobs), (sum(exp.logprobs), sum(after))


def check_published_weights_change_samples(policy: Policy, renderer: ChatRenderer, max_steps: int = 40) -> None:
    greedy = SamplingSettings(n=1, temperature=0.0, max_tokens=16)
    prompt = renderer.render(QUESTION)
    before = [engine.generate([prompt], greedy)[0][0] for engine in policy.engines()]
    assert all(renderer.decode(s.response_token_ids).strip() != TARGET for s in before)
    exp = target_experience(renderer)
    for steps in range(max_steps):  # on-policy steps until the trainer itself answers TARGET greedily
        exp = on_policy(policy, exp)
        if min(exp.logprobs) > math.log(0.9):
            break
        policy.trainer.train_step([exp])
    assert min(exp.logprobs) > math.log(0.9), f"the trainer did not learn the target in {max_steps} steps"
    print(f"the trainer learned the target in {steps} steps")
    version = policy.trainer.global_step
    metrics = policy.sync(version)
    assert metrics["sync/model_version"] == version
    for engine in policy.engines():
        assert engine.model_version() == version
        [[after]] = engine.generate([prompt], greedy)
        assert renderer.decode(after.response_token_ids).strip() == TARGET


def check_checkpoint_round_trip(policy: Policy, renderer: ChatRenderer, path: Path) -> None:
    exp = on_policy(policy, target_experience(renderer, eid="contract-ckpt"))
    exp.advantage = -0.5  # any direction will do; a fresh one so the step is not a no-op
    step = policy.trainer.global_step
    policy.trainer.save_checkpoint(path)
    saved = policy.trainer.logprobs([exp])[0]
    first = policy.trainer.train_step([exp])
    after_first = policy.trainer.logprobs([exp])[0]
    assert after_first != saved
    policy.trainer.load_checkpoint(path)
    assert policy.trainer.global_step == step
    assert _close(policy.trainer.logprobs([exp])[0], saved)
    again = policy.trainer.train_step([exp])  # optimizer state restored: the same step again
    assert math.isclose(again["loss"], first["loss"], rel_tol=1e-4, abs_tol=1e-6), (first, again)
    assert _close(policy.trainer.logprobs([exp])[0], after_first)


def _close(a: list[float], b: list[float], tol: float = 1e-4) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))
