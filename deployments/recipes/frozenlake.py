"""frozenlake — FrozenLake (gymnasium), multi-turn GRPO on SmolLM2-135M-Instruct on CPU (after Trinity-RFT's
grpo_frozen_lake example).

The model sees a 4x4 map as text and answers one move a turn (```Up```, ```Down```, ```Left```, ```Right```);
gymnasium's FrozenLake steps and shows the new map (workflows/frozenlake.py). Reward 1.0 on the goal. The maps are
generated (generator:frozenlake, no download): non-slippery, 2 to 6 moves from S to G. Each episode is one
experience whose mask trains only the model's turns. 4 steps of 2 maps × 4 episodes, at most 6 turns of 24 tokens.

Run it:  rft run frozenlake          (inspect first: rft validate frozenlake)
"""

from deployments.recipes.gsm8k import grpo_only as gsm8k

FROZENLAKE_MAPS = {"size": 4, "frozen_prob": 0.8, "min_path": 2, "max_path": 6, "is_slippery": False}
FROZENLAKE_ARGS = {"max_turns": 6, "max_tokens_per_turn": 24, "episode_timeout_s": 300}


def frozenlake_taskset(name: str, split: str, **extra: object) -> dict:
    return {
        "name": name, "path": "generator:frozenlake", "split": split, "generator_args": FROZENLAKE_MAPS,
        "format": {"prompt_key": "map"},  # the column that must be there
        "default_workflow_type": "frozenlake", "rollout_args": {"temperature": 1.0}, "workflow_args": FROZENLAKE_ARGS,
        **extra,
    }


config = gsm8k.with_overrides(
    {
        "name": "frozenlake",
        "algorithm.repeat_times": 4,
        "model.max_prompt_tokens": 256,  # the rules and the first map: ~150 tokens
        "model.max_response_tokens": 384,  # the whole trajectory: 6 turns and the maps shown after them
        "buffer.batch_size": 2,
        "buffer.total_steps": 4,
        "buffer.explorer_input": {
            "taskset": frozenlake_taskset("frozenlake", "train"),
            # 16 held-out maps, greedy: the success rate before and after
            "eval_tasksets": [frozenlake_taskset("frozenlake-eval", "test[:16]", repeat_times=1,
                                                 rollout_args={"temperature": 0.0})],
        },
        "explorer.eval_interval": 4,
        "trainer.save_interval": 4,
        "trainer.micro_batch_size": 4,  # trajectories are long: less activation memory per micro-batch
    }
)
