"""sciworld — ScienceWorld, multi-turn GRPO on SmolLM2-135M-Instruct on CPU (after Trinity-RFT's sciworld_workflow).

The model reads a ScienceWorld task and the room it stands in and answers one command a turn (<action>look
around</action>); ScienceWorld (the `scienceworld` package, Java) answers (workflows/sciworld.py). The reward is
ScienceWorld's score / 100, success a completed task. The tasks are three `find-*` tasks of ScienceWorld's list,
its own train and test variations (generator:sciworld), with its `easy` simplifications. Tiny: 2 steps of 2 tasks ×
4 episodes, at most 4 turns of 32 tokens.

Run it:  rft run sciworld          (inspect first: rft validate sciworld)
"""

from deployments.recipes.gsm8k import grpo_only as gsm8k

SCIWORLD_TASKS = {"tasks": ["find-living-thing", "find-non-living-thing", "find-plant"], "train_per_task": 10,
                  "test_per_task": 3, "simplification": "easy"}
SCIWORLD_ARGS = {"max_turns": 4, "max_tokens_per_turn": 32, "episode_timeout_s": 300}


def sciworld_taskset(name: str, split: str, **extra: object) -> dict:
    return {
        "name": name, "path": "generator:sciworld", "split": split, "generator_args": SCIWORLD_TASKS,
        "format": {"prompt_key": "task_name"},  # the column that must be there
        "default_workflow_type": "sciworld", "rollout_args": {"temperature": 1.0}, "workflow_args": SCIWORLD_ARGS,
        **extra,
    }


config = gsm8k.with_overrides(
    {
        "name": "sciworld",
        "algorithm.repeat_times": 4,
        "model.max_prompt_tokens": 512,  # the rules, the task and the first room: ~350 tokens
        "model.max_response_tokens": 768,  # the whole trajectory: 4 turns and ScienceWorld's answers
        "buffer.batch_size": 2,
        "buffer.total_steps": 2,
        "buffer.explorer_input": {
            "taskset": sciworld_taskset("sciworld", "train"),
            # held-out variations, greedy: the success rate and score before and after
            "eval_tasksets": [sciworld_taskset("sciworld-eval", "test[:4]", repeat_times=1,
                                               rollout_args={"temperature": 0.0})],
        },
        "explorer.eval_interval": 2,
        "trainer.save_interval": 2,
        "trainer.micro_batch_size": 2,  # trajectories are long: less activation memory per micro-batch
    }
)
