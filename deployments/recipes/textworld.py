"""textworld — TextWorld games generated here, multi-turn GRPO on SmolLM2-135M-Instruct on CPU.

Each task is a text adventure TextWorld makes from a seed (generator:textworld: 2 rooms, 4 objects, a 2-action
quest; the game is compiled on first use into ~/.cache/rft/textworld). The model reads the quest, the room and its
inventory and answers one command a turn (<action>go east</action>); the game answers (workflows/textworld.py,
through textworld.gym). The reward is the game's score / max score, success a won quest. ALFWorld runs on TextWorld
but its games are a download this project cannot fetch: these are the local stand-in. Tiny: 2 steps of 2 games × 4
episodes, at most 4 turns of 32 tokens.

Run it:  rft run textworld          (inspect first: rft validate textworld)
"""

from deployments.recipes.gsm8k import grpo_only as gsm8k

TEXTWORLD_GAMES = {"nb_rooms": 2, "nb_objects": 4, "quest_length": 2, "train_size": 200, "test_size": 8}
TEXTWORLD_ARGS = {"max_turns": 4, "max_tokens_per_turn": 32, "episode_timeout_s": 300}


def textworld_taskset(name: str, split: str, **extra: object) -> dict:
    return {
        "name": name, "path": "generator:textworld", "split": split, "generator_args": TEXTWORLD_GAMES,
        "format": {"prompt_key": "game_seed"},  # the column that must be there
        "default_workflow_type": "textworld", "rollout_args": {"temperature": 1.0}, "workflow_args": TEXTWORLD_ARGS,
        **extra,
    }


config = gsm8k.with_overrides(
    {
        "name": "textworld",
        "algorithm.repeat_times": 4,
        "model.max_prompt_tokens": 384,  # the rules, the quest and the first room: ~250 tokens
        "model.max_response_tokens": 640,  # the whole trajectory: 4 turns and the game's answers
        "buffer.batch_size": 2,
        "buffer.total_steps": 2,
        "buffer.explorer_input": {
            "taskset": textworld_taskset("textworld", "train"),
            # held-out games, greedy: the success rate and score before and after
            "eval_tasksets": [textworld_taskset("textworld-eval", "test[:4]", repeat_times=1,
                                                rollout_args={"temperature": 0.0})],
        },
        "explorer.eval_interval": 2,
        "trainer.save_interval": 2,
        "trainer.micro_batch_size": 2,  # trajectories are long: less activation memory per micro-batch
    }
)
