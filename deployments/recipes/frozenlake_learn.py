"""frozenlake-learn — the frozenlake recipe sized to measure learning: held-out success before and after RL.

The untrained SmolLM2-135M-Instruct never answers with a move in backticks on FrozenLake (0 of 50 held-out maps,
greedy: no move at all), so RL alone has no successful episode to learn from. The recipe starts the way arith does:
a short SFT warm-up on shortest walks (generator:frozenlake with `demonstrations`: each move of a train map's
shortest walk, the episode so far as context, exactly as the workflow shows it), stopped while the model still
fails on many maps, then GRPO on the same kind of maps, rewarded only on the goal. GRPO evaluates, greedy, on
1,000 held-out maps at its start (the warm-up's weights) and every 20 steps.

Each turn also says where the goal lies from the player (workflow_args `goal_hint`, e.g. "The goal is 2 steps down
and 1 step left.", not the holes): on the drawn map alone, or with both cells' rows and columns, warm-up and GRPO
left the model at or below a random walk's success. The maps are easier than `frozenlake`'s, so that a run fits on
2 cores: 4x4, not slippery, the goal 1 to 3 moves away, at most 4 turns.
Numbers and minutes: docs/recipes/frozenlake.md.

Run it:  rft run frozenlake-learn          (inspect first: rft validate frozenlake-learn)
"""

from deployments.recipes.frozenlake import FROZENLAKE_ARGS, FROZENLAKE_MAPS
from deployments.recipes.frozenlake import config as frozenlake
from schemas import (
    AlgorithmConfig,
    BufferConfig,
    DataFormat,
    ModelConfig,
    OptimizerConfig,
    StageConfig,
    StorageConfig,
    TorchTrainerConfig,
)

# GRPO's gain is a difference of a few points over the same maps: its standard error falls with sqrt(maps)
EVAL_MAPS = 1000
MAPS = {**FROZENLAKE_MAPS, "min_path": 1, "max_path": 3, "test_size": EVAL_MAPS}
ARGS = {**FROZENLAKE_ARGS, "max_turns": 4, "goal_hint": True}
# Without a hint, 40 steps taught the form but not the map (22 of 200; a random walk reaches 17 %), nor did 20 steps
# with both cells' rows and columns (21 of 200). With the hint, how far 8 steps follow it depends on the train maps
# (0.855 and 0.655 in two runs); GRPO takes it to a walk blind to the holes (about 0.88) or past it.
WARMUP_STEPS = 8
GRPO_STEPS = 60
EVAL_EVERY = 20  # held-out success at 0, 20, 40 and 60 GRPO steps: a curve, not two points

# The warm-up's rows: every move of the train maps' shortest walks (2,016 rows from 1,000 maps), trained on the move,
# each shown as the workflow shows it (goal_hint alike).
DEMONSTRATIONS = StorageConfig(
    name="frozenlake-demonstrations", path="generator:frozenlake", split="train",
    generator_args={**MAPS, "demonstrations": ARGS["max_turns"], "goal_hint": ARGS["goal_hint"]},
    format=DataFormat(prompt_type="messages", messages_key="messages"),
)


def _taskset(name: str, split: str, **extra: object) -> dict:
    return {"name": name, "path": "generator:frozenlake", "split": split, "generator_args": MAPS,
            "format": {"prompt_key": "map"}, "default_workflow_type": "frozenlake", "workflow_args": ARGS,
            **extra}


EVAL = _taskset("frozenlake-eval", "test", repeat_times=1, rollout_args={"temperature": 0.0})

config = frozenlake.with_overrides({
    "name": "frozenlake-learn",
    "algorithm.repeat_times": 8,
    "algorithm.optimizer.lr": 5e-5,  # 20 steps at 2e-5 moved held-out success by 0.035 ± 0.036 (noise)
    "buffer.batch_size": 8,  # 8 maps x 8 episodes a step
    "buffer.total_steps": GRPO_STEPS,
    "buffer.explorer_input.taskset": _taskset("frozenlake", "train", rollout_args={"temperature": 1.0}),
    "buffer.explorer_input.eval_tasksets": [EVAL],
    "explorer.eval_interval": EVAL_EVERY,
    "trainer.save_interval": GRPO_STEPS,
    "trainer.micro_batch_size": 16,
    "stages": [
        StageConfig(
            stage_name="sft_warmup",
            mode="train",
            algorithm=AlgorithmConfig(algorithm_type="sft", optimizer=OptimizerConfig(
                lr=2e-4, lr_scheduler_type="constant")),
            # A row's prompt is the whole episode so far: up to 3 maps and moves (~300 tokens). The response budget
            # stays the episode's: the stage's evaluations play whole episodes with it.
            model=ModelConfig(model_path=frozenlake.model.model_path, max_prompt_tokens=512,
                              max_response_tokens=frozenlake.model.max_response_tokens),
            # not evaluated: the GRPO stage evaluates the same weights at its start
            buffer=BufferConfig(batch_size=16, train_batch_size=16, total_steps=WARMUP_STEPS,
                                trainer_input={"experience_buffer": DEMONSTRATIONS}),
            trainer=TorchTrainerConfig(dtype="float32", device="auto", micro_batch_size=8,
                                       save_interval=WARMUP_STEPS),
        ).model_dump(exclude_unset=True),
        {"stage_name": "grpo"},
    ],
})
