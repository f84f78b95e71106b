"""The puzzles of the generated game tasksets and their rules: FrozenLake maps (`generator:frozenlake`) and Sudoku
boards (`generator:sudoku`). The generators (generators/) make them; the workflows that play them
(workflows/frozenlake.py, workflows/sudoku.py) read them back and judge moves with the same rules.

A FrozenLake map is rows of S (start), F (frozen), H (hole), G (goal), gymnasium's `desc`. A Sudoku board is
`size` rows of `size` digits, 0 for an empty cell; `size` is a square (4: 2x2 boxes, 9: 3x3 boxes).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence

# -- FrozenLake ----------------------------------------------------------------------------------------------

# (row, column) offsets of the four moves
MOVES: dict[str, tuple[int, int]] = {"left": (0, -1), "down": (1, 0), "right": (0, 1), "up": (-1, 0)}


def find_cell(rows: Sequence[str], cell: str) -> tuple[int, int]:
    """(row, column) of the first `cell` letter of a map (ValueError if it has none)."""
    for r, row in enumerate(rows):
        if cell in row:
            return r, row.index(cell)
    raise ValueError(f"the map has no {cell!r}: {list(rows)}")


def shortest_moves(rows: Sequence[str]) -> list[str] | None:
    """One shortest walk from S to G over frozen cells (no slipping) as moves ("down", ...), the first found in MOVES'
    order; None when the holes cut G off."""
    start, goal = find_cell(rows, "S"), find_cell(rows, "G")
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        if (r, c) == goal:
            moves: list[str] = []
            at = goal
            while (step := came[at]) is not None:
                at, move = step
                moves.append(move)
            return moves[::-1]
        for move, (dr, dc) in MOVES.items():
            nr, nc = r + dr, c + dc
            if 0 <= nr < len(rows) and 0 <= nc < len(rows[nr]) and (nr, nc) not in came and rows[nr][nc] != "H":
                came[(nr, nc)] = ((r, c), move)
                queue.append((nr, nc))
    return None


def shortest_path(rows: Sequence[str]) -> int | None:
    """The fewest moves from S to G over frozen cells (no slipping), None when the holes cut G off."""
    moves = shortest_moves(rows)
    return None if moves is None else len(moves)


# FrozenLake as the model reads it: the frozenlake workflow's episodes (workflows/frozenlake.py) and the warm-up rows
# generator:frozenlake makes of shortest walks (`frozenlake_demonstration`) are written by these same functions.
FROZENLAKE_SYMBOLS = {"S": "_", "F": "_", "H": "O", "G": "G"}


def frozenlake_view(rows: Sequence[str], at: tuple[int, int]) -> str:
    """The map as the model sees it: P on the player's cell, _ ice, O a hole, G the goal."""
    return "\n".join(" ".join("P" if (r, c) == at else FROZENLAKE_SYMBOLS[cell] for c, cell in enumerate(row))
                     for r, row in enumerate(rows))


def frozenlake_rules(max_turns: int, is_slippery: bool) -> str:
    """The system prompt of a FrozenLake episode."""
    slippery = " The ice is slippery: a move may take you sideways instead." if is_slippery else ""
    return ("You walk on a frozen lake. Reach the goal G without stepping into a hole O. On the map, P is you, "
            f"_ is ice, O is a hole, G is the goal.{slippery} Each turn, answer with one move in triple backticks: "
            "```Up```, ```Down```, ```Left``` or ```Right```. "
            f"You have {max_turns} moves.")


def _steps(count: int, way: str) -> str:
    return f"{count} step{'s' * (count != 1)} {way}"


def frozenlake_goal_hint(rows: Sequence[str], at: tuple[int, int]) -> str:
    """Where the goal lies from the player, in words (workflow_args `goal_hint`), e.g. "The goal is 2 steps down and 1
    step left.": SmolLM2-135M does not learn to find P and G on the drawn map alone (docs/recipes/frozenlake.md).
    It says nothing of the holes."""
    goal = find_cell(rows, "G")
    rows_away, cols_away = goal[0] - at[0], goal[1] - at[1]
    ways = [_steps(abs(n), way) for n, way in ((rows_away, "down" if rows_away > 0 else "up"),
                                                (cols_away, "right" if cols_away > 0 else "left")) if n]
    return f"The goal is {' and '.join(ways)}.\n"


def frozenlake_turn(view: str, note: str = "", where: str = "") -> str:
    """The user turn that shows the map (and, with `goal_hint`, where the goal lies) and asks for the next move."""
    return f"{note}The map:\n{view}\n{where}Your move?"


def frozenlake_demonstration(rows: Sequence[str], max_turns: int,
                              goal_hint: bool = False) -> list[list[dict[str, str]]]:
    """A shortest walk of a (non-slippery) map as the frozenlake workflow shows it with `max_turns` (and
    `goal_hint`): one chat per
    move, the episode so far (rules, maps, moves) ending with that move as the assistant's ```Move```. The rows of
    an SFT warm-up (generator:frozenlake with `demonstrations`): each teaches one turn, the earlier ones as context.
    A shortest walk never meets an edge or a hole, so the map after each move is the player's new cell."""
    moves = shortest_moves(rows)
    if moves is None or len(moves) > max_turns:
        raise ValueError(f"no walk of at most {max_turns} moves on {list(rows)}")
    at = find_cell(rows, "S")

    def turn() -> str:
        return frozenlake_turn(frozenlake_view(rows, at), where=frozenlake_goal_hint(rows, at) if goal_hint else "")

    chat = [{"role": "system", "content": frozenlake_rules(max_turns, False)}, {"role": "user", "content": turn()}]
    chats = []
    for move in moves:
        chat = [*chat, {"role": "assistant", "content": f"```{move.capitalize()}```"}]
        chats.append(chat)
        at = (at[0] + MOVES[move][0], at[1] + MOVES[move][1])
        chat = [*chat, {"role": "user", "content": turn()}]
    return chats


def frozenlake_map(rng: random.Random, size: int, frozen_prob: float) -> list[str]:
    """A size x size map: each cell a hole with probability 1 - frozen_prob, then S and G on two different cells
    (anywhere, as in Trinity-RFT's maps); not checked for a path (shortest_path does)."""
    cells = [["F" if rng.random() < frozen_prob else "H" for _ in range(size)] for _ in range(size)]
    start, goal = rng.sample(range(size * size), 2)
    cells[start // size][start % size] = "S"
    cells[goal // size][goal % size] = "G"
    return ["".join(row) for row in cells]


# -- Sudoku --------------------------------------------------------------------------------------------------


def box_size(size: int) -> int:
    """The side of a box of a size x size board (2 for 4, 3 for 9); ValueError when size is not a square."""
    box = math.isqrt(size)
    if box < 2 or box * box != size:
        raise ValueError(f"a Sudoku board's size is a square of at least 4 (4, 9, 16), got {size}")
    return box


def sudoku_solution(rng: random.Random, size: int) -> list[list[int]]:
    """A random solved board: the pattern board with its digits relabelled, its bands and the rows within each band
    shuffled, likewise its stacks and columns, and transposed half the time (each keeps a board solved)."""
    box = box_size(size)
    pattern = [[(box * (r % box) + r // box + c) % size + 1 for c in range(size)] for r in range(size)]
    digits = rng.sample(range(1, size + 1), size)

    def order() -> list[int]:
        return [band * box + i for band in rng.sample(range(box), box) for i in rng.sample(range(box), box)]

    rows, cols = order(), order()
    board = [[digits[pattern[r][c] - 1] for c in cols] for r in rows]
    if rng.random() < 0.5:
        board = [list(col) for col in zip(*board, strict=True)]
    return board


def sudoku_puzzle(rng: random.Random, solution: list[list[int]], blanks: int) -> list[list[int]]:
    """The solution with `blanks` distinct cells emptied (0)."""
    size = len(solution)
    puzzle = [row[:] for row in solution]
    for cell in rng.sample(range(size * size), blanks):
        puzzle[cell // size][cell % size] = 0
    return puzzle


def conflict(board: Sequence[Sequence[int]], row: int, col: int, value: int) -> str | None:
    """Why `value` may not go in the empty cell (row, col) (0-based), or None: the row, column or box already
    holds it."""
    size, box = len(board), box_size(len(board))
    if value in board[row]:
        return f"row {row + 1} already has a {value}"
    if any(board[r][col] == value for r in range(size)):
        return f"column {col + 1} already has a {value}"
    top, left = row - row % box, col - col % box
    if any(board[r][c] == value for r in range(top, top + box) for c in range(left, left + box)):
        return f"the box of row {row + 1}, column {col + 1} already has a {value}"
    return None


def is_valid(board: Sequence[Sequence[int]]) -> bool:
    """No digit twice in a row, a column or a box (empty cells aside)."""
    size, box = len(board), box_size(len(board))
    units = [list(row) for row in board] + [[board[r][c] for r in range(size)] for c in range(size)]
    units += [[board[r][c] for r in range(top, top + box) for c in range(left, left + box)]
              for top in range(0, size, box) for left in range(0, size, box)]
    return all(len(filled := [v for v in unit if v]) == len(set(filled)) for unit in units)


def is_solved(board: Sequence[Sequence[int]]) -> bool:
    """Full and valid: any completion that keeps the rules counts, not only the generator's solution."""
    return all(all(row) for row in board) and is_valid(board)


def board_text(board: Sequence[Sequence[int]]) -> str:
    """Rows of digits, 0 for an empty cell, one row a line: how a generated row stores a board."""
    return "\n".join("".join(str(v) for v in row) for row in board)


def parse_board(value: object) -> list[list[int]]:
    """A board from a row: board_text's form (also with spaces or '.' for empty), or a list of lists of ints
    (Trinity-RFT's `puzzle`). ValueError when it is not a square board."""
    if isinstance(value, str):
        lines = [line for line in value.strip().splitlines() if line.strip()]
        board = [[0 if ch in "._" else int(ch) for ch in line if not ch.isspace() and ch not in ",|"] for line in lines]
    elif isinstance(value, Sequence):
        board = [[int(v) for v in row] for row in value]  # type: ignore[union-attr]
    else:
        raise ValueError(f"a Sudoku board is a string of digit rows or a list of rows, got {type(value).__name__}")
    size = len(board)
    box_size(size)
    if any(len(row) != size for row in board) or any(not 0 <= v <= size for row in board for v in row):
        raise ValueError(f"not a {size}x{size} board of digits 0-{size}: {board}")
    return board
