"""q20 — twenty questions, multi-turn GRPO on SmolLM2-135M-Instruct on CPU (the embedded default).

The model asks yes/no questions about a secret entity (one of 28 in data/q20/entities.json) and guesses
it; a rule-based oracle answers (workflows/q20.py). Each episode is one experience whose mask trains
only the model's turns. 4 steps of 2 secrets × 4 episodes, at most 6 turns of 24 tokens each.

Run it:  rft run q20          (inspect first: rft validate q20)
"""

from deployments.recipes.gsm8k import grpo_only as gsm8k

Q20_ARGS = {"max_turns": 6, "max_tokens_per_turn": 24, "episode_timeout_s": 300}


def q20_taskset(name: str, split: str, **extra: object) -> dict:
    return {
        "name": name, "path": "data/q20", "split": split, "format": {"prompt_key": "secret"},
        "default_workflow_type": "q20", "rollout_args": {"temperature": 1.0}, "workflow_args": Q20_ARGS, **extra,
    }


config = gsm8k.with_overrides(
    {
        "name": "q20",
        "algorithm.repeat_times": 4,
        "model.max_prompt_tokens": 256,  # the rules and the 28 names: ~190 tokens
        "model.max_response_tokens": 320,  # the whole trajectory: 6 turns and the oracle's answers
        "buffer.batch_size": 2,
        "buffer.total_steps": 4,
        "buffer.explorer_input": {
            "taskset": q20_taskset("q20", "train"),
            "eval_tasksets": [q20_taskset("q20-eval", "test", repeat_times=1)],
        },
        "explorer.eval_interval": 4,
        "trainer.save_interval": 4,
        "trainer.micro_batch_size": 4,  # trajectories are long: less activation memory per micro-batch
    }
)
