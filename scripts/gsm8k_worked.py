"""Write data/gsm8k-worked/train.jsonl: the bundled GSM8K train split with each solution as the `gsm8k`
recipe's SFT warm-up teaches it (run from the repository root: .venv/bin/python scripts/gsm8k_worked.py).

A row keeps `question` and `answer` (the number) and gains `solution`: GSM8K's worked answer with the
calculator annotations (`<<48/2=24>>`) removed and the final `#### 72` written as `The answer is \\boxed{72}.`,
the form the prompt asks for. Only solutions of at most MAX_CHARS characters are kept (80 % of the split,
about 100 tokens or fewer): the recipe cuts responses at 128 tokens, and a cut answer has no box.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from workflows.math_workflow import gold_answer

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "data" / "gsm8k" / "train.jsonl"
TARGET = ROOT / "data" / "gsm8k-worked" / "train.jsonl"
MAX_CHARS = 360


def worked(row: dict[str, str]) -> dict[str, str]:
    """{"question", "answer", "solution"} of one GSM8K row."""
    steps = re.sub(r"<<[^>]*>>", "", row["answer"]).rsplit("####", 1)[0]
    number = gold_answer(row["answer"])  # the answer the RL reward checks against
    return {"question": row["question"], "answer": number,
            "solution": f"{steps.strip()} The answer is \\boxed{{{number}}}."}


def kept_rows() -> tuple[list[dict[str, str]], int]:
    """The rows the file holds, and how many rows the train split has."""
    rows = [worked(json.loads(line)) for line in SOURCE.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row for row in rows if len(row["solution"]) <= MAX_CHARS], len(rows)


def main() -> None:
    kept, total = kept_rows()
    TARGET.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in kept), encoding="utf-8")
    print(f"{TARGET.relative_to(ROOT)}: {len(kept)} of {total} rows (solutions of at most {MAX_CHARS} characters)")


if __name__ == "__main__":
    main()
