"""rg-countdown — reasoning-gym's countdown (make a target from given numbers) with GRPO on SmolLM2-135M-Instruct on
CPU, scored by reasoning-gym's own verifier.

The problems are generated (generator:reasoning_gym, no download) at an easy setting of countdown's own difficulty
keys: three numbers from 1 to 20, a target from 10 to 50. The model answers in <answer>...</answer> (reasoning-gym's
system prompt); reward_fn reasoning_gym_reward scores the expression with countdown's score_answer (1.0 right, 0.05
the wrong numbers, 0.01 unparsable, 0 without an answer). 4 steps of 2 problems x 8 answers. Another dataset or
difficulty: --set buffer.explorer_input.taskset.generator_args.dataset=leg_counting (docs/generators.md).

Run it:  rft run rg-countdown          (inspect first: rft validate rg-countdown)
"""

from deployments.recipes.gsm8k import grpo_only as gsm8k

# countdown's own settings (reasoning_gym/games/countdown.py CountdownConfig): the difficulty.
COUNTDOWN = {"dataset": "countdown", "config": {"min_numbers": 3, "max_numbers": 3, "max_value": 20,
                                                "min_target": 10, "max_target": 50}}


def countdown_taskset(name: str, split: str, **extra: object) -> dict:
    return {
        "name": name, "path": "generator:reasoning_gym", "split": split, "generator_args": COUNTDOWN,
        "format": {"prompt_key": "question", "response_key": "answer"},
        "default_workflow_type": "math_workflow", "default_reward_fn_type": "reasoning_gym_reward",
        "reward_fn_args": {"answer_format": "answer_tag"},
        **extra,
    }


config = gsm8k.with_overrides(
    {
        "name": "rg-countdown",
        "model.max_prompt_tokens": 320,  # reasoning-gym's system prompt and the question: ~220 tokens
        "model.max_response_tokens": 192,
        "buffer.batch_size": 2,
        "buffer.total_steps": 4,
        "buffer.explorer_input": {
            "taskset": countdown_taskset("rg-countdown", "train"),
            # 32 held-out problems, greedy: the verifier's strict rate before and after
            "eval_tasksets": [countdown_taskset("rg-countdown-eval", "test[:32]", repeat_times=1,
                                                rollout_args={"temperature": 0.0})],
        },
        "explorer.eval_interval": 4,
        "trainer.save_interval": 4,
    }
)
