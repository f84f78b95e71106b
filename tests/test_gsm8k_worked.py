"""data/gsm8k-worked, the gsm8k recipe's SFT rows: what scripts/gsm8k_worked.py writes from the bundled
GSM8K train split, each solution ending in the gold answer boxed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from workflows.math_workflow import last_boxed

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gsm8k_worked", ROOT / "scripts" / "gsm8k_worked.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bundled_file_is_what_the_script_writes(script: ModuleType) -> None:
    kept, total = script.kept_rows()
    on_disk = [json.loads(line) for line in (ROOT / "data" / "gsm8k-worked" / "train.jsonl").read_text().splitlines()]
    assert on_disk == kept and 0.75 * total < len(kept) < total


def test_a_solution_is_the_worked_answer_without_annotations_and_boxed(script: ModuleType) -> None:
    row = {"question": "q", "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 1,072"}
    assert script.worked(row) == {
        "question": "q", "answer": "1072", "solution": "Natalia sold 48/2 = 24 clips in May. The answer is \\boxed{1072}.",
    }
    for row in script.kept_rows()[0]:
        assert "<<" not in row["solution"] and "####" not in row["solution"]
        assert last_boxed(row["solution"]) == row["answer"]
