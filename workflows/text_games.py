"""What the text-game workflows (`sciworld`, `textworld`) share: reading the model's command out of its answer.

A command is the last <action>...</action> of the answer (Trinity-RFT's sciworld format), else the last ```...```
block, else the answer's first non-empty line (an "Action:" in front of it dropped). None when there is no text.
Control characters become spaces and the command is cut to MAX_COMMAND_BYTES of UTF-8: a NUL or a byte 0x10-0x14 in a
command crashes TextWorld's interpreter (jericho's frotz: a segmentation fault, measured), and jericho cuts its input
at 198 bytes, which could split a character.
"""

from __future__ import annotations

import re

ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
FENCED = re.compile(r"```\s*([^`]*?)\s*```", re.DOTALL)
PREFIX = re.compile(r"^(?:action|command)\s*:\s*", re.IGNORECASE)
MAX_COMMAND_BYTES = 190


def parse_command(text: str) -> str | None:
    """The command of an answer, or None (see the module docstring)."""
    found = ACTION_TAG.findall(text) or FENCED.findall(text)
    if found:
        candidate = found[-1]
    else:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        candidate = lines[0] if lines else ""
    printable = "".join(ch if ch.isprintable() else " " for ch in candidate)
    command = " ".join(PREFIX.sub("", printable.strip()).split()).strip().rstrip(".!").strip()
    return command.encode()[:MAX_COMMAND_BYTES].decode(errors="ignore").strip() or None


def command_rules(example: str) -> str:
    """The answer format as the system prompts state it."""
    return ("Each turn, answer with exactly one command inside <action> </action>, for example "
            f"<action>{example}</action>. You may think first, briefly.")


class ScoredGame:
    """What the text games that keep a score share (ScienceWorld, TextWorld): the score as a fraction of the game's
    best, paid turn by turn as it grows, and the episode's metrics. The env sets `success`, `steps`, `invalid`."""

    success: bool = False
    steps: int = 0
    invalid: int = 0
    score: float = 0.0  # normalised, 0-1

    def advance(self, score: float) -> float:
        """The turn's reward: how much the score (0-1) grew since the last turn."""
        reward, self.score = score - self.score, score
        return reward

    def metrics(self) -> dict[str, float]:
        return {"success": float(self.success), "env_steps": float(self.steps), "invalid_actions": float(self.invalid),
                "score": self.score}

    def final_reward(self) -> tuple[float, dict[str, float]]:
        return 0.0, {"accuracy": 1.0 if self.success else 0.0, "score": self.score}  # the score came turn by turn
