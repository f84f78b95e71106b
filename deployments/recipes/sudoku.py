"""sudoku — 4x4 Sudoku, multi-turn GRPO on SmolLM2-135M-Instruct on CPU (after Trinity-RFT's sudoku_workflow).

The model sees the board and writes moves, one `row column digit` a line, up to 5 a turn; the environment checks
them against the rules and shows the board (workflows/sudoku.py). Rewards as Trinity's: +1.0 when the board is
solved, -1.0 for an invalid turn (which ends the episode), 0 otherwise. The puzzles are generated
(generator:sudoku, no download): 4x4 with 4 blanks. Each episode is one experience whose mask trains only the
model's turns. 4 steps of 2 puzzles × 4 episodes, at most 4 turns of 32 tokens.

Run it:  rft run sudoku          (inspect first: rft validate sudoku)
"""

from deployments.recipes.gsm8k import grpo_only as gsm8k

SUDOKU_PUZZLES = {"size": 4, "blanks": 4}
SUDOKU_ARGS = {"max_turns": 4, "max_tokens_per_turn": 32, "episode_timeout_s": 300, "max_moves_per_turn": 5}


def sudoku_taskset(name: str, split: str, **extra: object) -> dict:
    return {
        "name": name, "path": "generator:sudoku", "split": split, "generator_args": SUDOKU_PUZZLES,
        "format": {"prompt_key": "puzzle"},  # the column that must be there
        "default_workflow_type": "sudoku", "rollout_args": {"temperature": 1.0}, "workflow_args": SUDOKU_ARGS,
        **extra,
    }


config = gsm8k.with_overrides(
    {
        "name": "sudoku",
        "algorithm.repeat_times": 4,
        "model.max_prompt_tokens": 256,  # the rules and the first board: ~170 tokens
        "model.max_response_tokens": 384,  # the whole trajectory: 4 turns and the boards shown after them
        "buffer.batch_size": 2,
        "buffer.total_steps": 4,
        "buffer.explorer_input": {
            "taskset": sudoku_taskset("sudoku", "train"),
            # 16 held-out puzzles, greedy: the success rate before and after
            "eval_tasksets": [sudoku_taskset("sudoku-eval", "test[:16]", repeat_times=1,
                                             rollout_args={"temperature": 0.0})],
        },
        "explorer.eval_interval": 4,
        "trainer.save_interval": 4,
        "trainer.micro_batch_size": 4,  # trajectories are long: less activation memory per micro-batch
    }
)
