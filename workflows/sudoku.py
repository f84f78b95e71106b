"""`sudoku`: fill a Sudoku board a few cells a turn; the environment checks each move and shows the board.

After Trinity-RFT's `sudoku_workflow` (multi-step: up to 5 moves a step, -1 for an invalid step, which ends the
episode, +1 when solved, 0 otherwise): here one episode is one experience whose mask trains only the model's turns
(workflows/multi_turn.py), with the same rewards by default.

The board the model sees: `Row 1: 1 _ 3 4`, one row a line, `_` an empty cell. A move is a line of three numbers,
`row column digit`, counted from 1 at the top left: "1 2 4" writes 4 in row 1, column 2. Lines that are not three
numbers are ignored (the model may think aloud), so an answer may carry up to `max_moves_per_turn` moves. A turn
is invalid when it has no move, too many, or a move that is off the board, writes on a filled cell, or repeats a
digit in its row, column or box (moves apply in order). An invalid turn earns `invalid_move_reward` and, with
`end_on_invalid` (Trinity's rule), ends the episode; without it the board is left as it was and the model is told
why. A valid turn earns `cell_reward` per cell it fills (0 by default: Trinity's sparse reward); the turn that
completes the board earns 1.0 more (`success`). Any completion that keeps the rules counts.

Rows (generator:sudoku, or a file): `puzzle` (rows of digits, 0 or `.` for empty, one a line; or a list of rows of
ints, Trinity's `puzzle`).

Recorded per episode (`info`): `success`, `env_steps` (turns whose moves were accepted), `cells_filled`,
`invalid_turns`, `step_states` (the board each turn saw) and `step_moves` (each turn's moves as [row, column,
digit], or null for an invalid turn).

workflow_args: max_turns, max_tokens_per_turn, episode_timeout_s (see workflows.multi_turn), max_moves_per_turn
  (default 5), invalid_move_reward (default -1.0), end_on_invalid (default true), cell_reward (default 0.0).
"""

from __future__ import annotations

import re
from typing import Any

from generators.games import box_size, conflict, is_solved, parse_board
from workflows.base import register_workflow
from workflows.multi_turn import DEFAULT_MAX_TURNS, Env, EnvStep, MultiTurnWorkflow
from workflows.render import Messages

DEFAULT_MAX_MOVES_PER_TURN = 5
DEFAULT_INVALID_MOVE_REWARD = -1.0
MOVE_LINE = re.compile(r"^\W*(\d+)\s*[ ,]\s*(\d+)\s*[ ,]\s*(\d+)\W*$")


def parse_moves(text: str) -> list[tuple[int, int, int]]:
    """The (row, column, digit) moves of an answer, as written (1-based): every line that is three numbers."""
    return [(int(r), int(c), int(v)) for line in text.splitlines() if (m := MOVE_LINE.match(line.strip()))
            for r, c, v in [m.groups()]]


def render_board(board: list[list[int]]) -> str:
    return "\n".join(f"Row {r + 1}: " + " ".join(str(v) if v else "_" for v in row) for r, row in enumerate(board))


class SudokuEnv(Env):
    def __init__(self, puzzle: list[list[int]], *, max_turns: int, max_moves: int = DEFAULT_MAX_MOVES_PER_TURN,
                 invalid_reward: float = DEFAULT_INVALID_MOVE_REWARD, end_on_invalid: bool = True,
                 cell_reward: float = 0.0) -> None:
        self.board = [row[:] for row in puzzle]
        self.size = len(puzzle)
        self.box = box_size(self.size)
        self.max_turns = max_turns
        self.max_moves = max_moves
        self.invalid_reward = invalid_reward
        self.end_on_invalid = end_on_invalid
        self.cell_reward = cell_reward
        self.solved = is_solved(self.board)
        self.accepted = 0
        self.filled = 0
        self.invalid = 0
        self.moves: list[list[list[int]] | None] = []

    def initial_messages(self) -> Messages:
        n, b = self.size, self.box
        system = (
            f"You solve a {n}x{n} Sudoku: every row, every column and every {b}x{b} box must hold the digits 1 to {n} "
            "once each. _ is an empty cell. Each turn, fill one or more empty cells, one move a line, written as "
            "three numbers: row column digit, counted from 1 at the top left. For example\n1 2 4\nwrites 4 in row 1, "
            f"column 2. At most {self.max_moves} moves a turn, {self.max_turns} turns."
        )
        return [{"role": "system", "content": system},
                {"role": "user", "content": f"The board:\n{render_board(self.board)}\nYour moves?"}]

    def state(self) -> str:
        return render_board(self.board)

    def check(self, moves: list[tuple[int, int, int]]) -> str | None:
        """Why the turn's moves are invalid, or None (they are applied to a copy in order)."""
        if not moves:
            return "no move found: write each move as three numbers on a line of its own, row column digit"
        if len(moves) > self.max_moves:
            return f"{len(moves)} moves, at most {self.max_moves} a turn"
        board = [row[:] for row in self.board]
        for r, c, v in moves:
            if not (1 <= r <= self.size and 1 <= c <= self.size and 1 <= v <= self.size):
                return f"{r} {c} {v}: rows, columns and digits go from 1 to {self.size}"
            if board[r - 1][c - 1]:
                return f"{r} {c} {v}: row {r}, column {c} is already filled"
            if (why := conflict(board, r - 1, c - 1, v)) is not None:
                return f"{r} {c} {v}: {why}"
            board[r - 1][c - 1] = v
        return None

    def step(self, response: str) -> EnvStep:
        moves = parse_moves(response)
        why = self.check(moves)
        if why is not None:
            self.invalid += 1
            self.moves.append(None)
            if self.end_on_invalid:
                return EnvStep([], reward=self.invalid_reward, done=True, metrics=self.metrics())
            return EnvStep([{"role": "user", "content": f"Invalid: {why}. The board is unchanged:\n"
                                                        f"{render_board(self.board)}\nYour moves?"}],
                           reward=self.invalid_reward, metrics=self.metrics())
        for r, c, v in moves:
            self.board[r - 1][c - 1] = v
        self.accepted += 1
        self.filled += len(moves)
        self.moves.append([list(m) for m in moves])
        reward = self.cell_reward * len(moves)
        if is_solved(self.board):
            self.solved = True
            return EnvStep([], reward=reward + 1.0, done=True, metrics=self.metrics())
        return EnvStep([{"role": "user", "content": f"Accepted. The board:\n{render_board(self.board)}\nYour moves?"}],
                       reward=reward, metrics=self.metrics())

    def metrics(self) -> dict[str, float]:
        return {"success": float(self.solved), "env_steps": float(self.accepted), "cells_filled": float(self.filled),
                "invalid_turns": float(self.invalid)}

    def final_reward(self) -> tuple[float, dict[str, float]]:
        return 0.0, {"accuracy": 1.0 if self.solved else 0.0}  # the solving turn's 1.0 is a turn reward

    def info(self) -> dict[str, Any]:
        return {"step_moves": self.moves, **self.metrics(), "success": self.solved}


@register_workflow("sudoku")
class SudokuWorkflow(MultiTurnWorkflow):
    """Sudoku, some cells a turn; one episode per sample of the group (Trinity's sudoku_workflow)."""

    @classmethod
    def required_keys(cls, fmt: Any) -> list[str]:
        return ["puzzle"]

    def make_env(self, index: int) -> Env:
        args = self.task.workflow_args or {}
        return SudokuEnv(
            parse_board(self.task.raw["puzzle"]),
            max_turns=int(args.get("max_turns", DEFAULT_MAX_TURNS)),
            max_moves=int(args.get("max_moves_per_turn", DEFAULT_MAX_MOVES_PER_TURN)),
            invalid_reward=float(args.get("invalid_move_reward", DEFAULT_INVALID_MOVE_REWARD)),
            end_on_invalid=bool(args.get("end_on_invalid", True)),
            cell_reward=float(args.get("cell_reward", 0.0)),
        )
