"""Worked steps checked one by one (workflows/worked_steps.py): the equations found, the per-token process
rewards on the real tokenizer, how the batch adds them to the advantage, and where they are refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from backends.batch import collate
from buffer.experience import Experience
from deployments import load_recipe
from workflows.render import renderer_for
from workflows.worked_steps import check_steps, step_token_rewards

RENDERER = renderer_for("HuggingFaceTB/SmolLM2-135M-Instruct")
TOKEN_REWARD = {"buffer.explorer_input.taskset.reward_fn_args": {"require_boxed": True, "step_token_reward": 0.5}}


def test_worked_steps_are_checked_one_by_one() -> None:
    assert check_steps("65 + 10 = 75, 75 + 7 = 82. \\boxed{82}") == (2, 0)
    assert check_steps("84 - 50 = 34, 34 - 7 = 29") == (2, 1)  # the borrow the warm-up gets wrong
    assert check_steps("9 * 6 = 56 and 3 × 4 = 12, 4 - 9 = -5") == (3, 1)
    assert check_steps("1.5 + 2 = 3.5, so 12 + 3 = 15.5") == (2, 1)  # decimals exactly
    assert check_steps("\\boxed{72}") == (0, 0)


def test_gsm8k_worked_solutions_are_checked_as_written() -> None:
    # The warm-up's greedy answer to GSM8K test/0, as written: $, x and / are arithmetic; 56 x 3 and 172 / 3 are wrong.
    janet = ("Janet makes 16 x 3 = 48 eggs per day.\nShe sells the remainder at the farmers' market for $2 x 4 = $8.\n"
             "She makes $48 + $8 = $56 per day.\nShe makes $56 x 3 = $172 per week.\nShe makes $172 / 3 = $56 per week.")
    assert check_steps(janet) == (5, 2)
    assert check_steps("3 * 4 * 5 = 60 and (3 + 4) * 2 = 14, 2 + 3 * 4 = 20") == (3, 1)  # precedence, not left to right
    assert check_steps("1,000 + 200 = 1,200. 48/2 = 24 clips, 10 / 3 = 3.33 but 10 / 3 = 3") == (4, 1)
    # Not equations: a lone number, a percentage, algebra, a division by zero, a word ending in x.
    assert check_steps("box 4 = 4, 20% of 50 = 10, 3x + 4 = 10, x = 5, 4 / 0 = 3") == (0, 0)
    assert check_steps("(" * 5000 + "1 + 1 = 2") == (0, 0)  # a parse too deep is no step, not a crash


def test_the_results_tokens_carry_the_reward_and_nothing_else_does() -> None:
    text = "84 - 50 = 34, 34 - 7 = 29. \\boxed{29}"
    ids = RENDERER.encode(text)
    rewards = step_token_rewards(ids, RENDERER.decode, 0.5)
    right = "".join(RENDERER.decode([t]) for t, r in zip(ids, rewards, strict=True) if r > 0)
    wrong = "".join(RENDERER.decode([t]) for t, r in zip(ids, rewards, strict=True) if r < 0)
    assert (right.strip(), wrong.strip()) == ("34", "29")  # the first result right, the second's 29 wrong, the box untouched
    assert len(rewards) == len(ids) and set(rewards) == {0.5, 0.0, -0.5}
    assert step_token_rewards(RENDERER.encode("\\boxed{29}"), RENDERER.decode, 0.5) == [0.0] * len(RENDERER.encode("\\boxed{29}"))


def test_the_batch_adds_process_rewards_to_the_outcome_advantage() -> None:
    def exp(eid: str, **fields: object) -> Experience:
        return Experience(eid=eid, task_id="t", group_id="g", prompt_token_ids=[1], response_token_ids=[3, 4, 5],
                          logprobs=[-1.0] * 3, reward=0.0, **fields)  # type: ignore[arg-type]

    batch = collate([exp("a", advantage=0.25, token_rewards=[0.0, -0.5, 0.5]), exp("b", advantage=-1.0)], pad_token_id=0)
    assert batch.advantages.tolist() == [[0.25, -0.25, 0.75], [-1.0, -1.0, -1.0]]
    with pytest.raises(ValueError, match="token_rewards"):
        exp("c", token_rewards=[0.0])


@pytest.mark.parametrize(("overrides", "says"), [
    ({"buffer.explorer_input.taskset.reward_fn_args": {"step_token_reward": -1}}, "must be ≥ 0"),
    ({**TOKEN_REWARD, "algorithm.algorithm_type": "ppo", "model.critic_model_path": "HuggingFaceTB/SmolLM2-135M-Instruct"},
     "critic.s values \\(GAE\\)"),
    ({**TOKEN_REWARD, "model.tinker.enable": True, "synchronizer.sync_method": "checkpoint"}, "one advantage per sequence"),
])
def test_process_rewards_are_refused_where_they_would_be_dropped(overrides: dict, says: str) -> None:
    load_recipe("arith").with_overrides({"stages": [], **TOKEN_REWARD})  # the torch trainer takes them
    with pytest.raises(ValidationError, match=says) as info:
        load_recipe("arith").with_overrides({"stages": [], **overrides})
    assert "buffer.explorer_input.taskset.reward_fn_args.step_token_reward" in str(info.value)
