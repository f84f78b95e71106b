"""Every number the README and docs state as a link's text is held by the file the link opens (issue 74).

`[36.0 minutes](docs/runs-data/..._steps.txt)` passes when that file holds 36.0 to the shown rounding: as written,
as seconds (2,157 s), as a clock (35:57.11) or as a share (0.4 for 40 %). A number changed by one digit fails.
Links to web pages and texts that are file names are not claims about a file's contents.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[([^\]]*\d[^\]]*)\]\(([^)#\s]+)(?:#[^)]*)?\)")
NUMBER = re.compile(r"(?<![\w.:])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w:])")
CLOCK = re.compile(r"(?<![\d:])(?:(\d+):)?(\d{1,2}):(\d{2}(?:\.\d+)?)(?![\d:])")  # h:mm:ss or mm:ss(.ss)
CHECKED = (".json", ".txt", ".jsonl", ".csv")


def claims() -> list[tuple[str, str, Path]]:
    """(where, the link's text, the file) of each link whose text holds a number and opens a data file."""
    found = []
    for doc in DOCS:
        for line_no, line in enumerate(doc.read_text().splitlines(), 1):
            for text, target in LINK.findall(line):
                if target.startswith(("http:", "https:")) or "/" in text or re.search(r"\.\w{2,5}$", text):
                    continue
                path = (doc.parent / target).resolve()
                if path.suffix in CHECKED and path.is_file():
                    found.append((f"{doc.relative_to(ROOT)}:{line_no}", text, path))
    return found


def numbers(text: str) -> list[str]:
    return [n.replace(",", "") for n in NUMBER.findall(text)]


def held(path: Path) -> list[float]:
    """The numbers a file holds, and its clock times as minutes and as seconds."""
    body = path.read_text()
    values = [float(n) for n in numbers(body)]
    for hours, minutes, seconds in CLOCK.findall(body):
        total_s = int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
        values += [total_s, total_s / 60]
    return values


def matches(claimed: str, values: list[float]) -> bool:
    """The claimed number is a file's value rounded as shown, as written, from seconds, or from a share."""
    decimals = len(claimed.split(".")[1]) if "." in claimed else 0
    target = float(claimed)
    return any(round(v * scale, decimals) == target or round(v * scale) == target and decimals == 0
               for v in values for scale in (1, 1 / 60, 100))


def test_every_linked_number_is_in_its_file() -> None:
    wrong = []
    for where, text, path in claims():
        values = held(path)
        for claimed in numbers(text):
            if not matches(claimed, values):
                wrong.append(f"{where}: '{text}' -> {path.relative_to(ROOT)} holds no {claimed}")
    assert wrong == []


def test_a_number_changed_by_one_digit_fails(tmp_path: Path) -> None:
    steps = tmp_path / "steps.txt"
    steps.write_text("whole run, wall clock (/usr/bin/time -v): 35:57.11\n")
    speed = tmp_path / "speed.json"
    speed.write_text('{"median_tokens_per_s": 138.1}\n')
    assert matches("36.0", held(steps)) and matches("138", held(speed))
    assert not matches("37.0", held(steps)) and not matches("139", held(speed))


@pytest.mark.parametrize("text", ["36.0 minutes", "138 tokens/s", "1,528.9 s"])
def test_numbers_are_read_as_written(text: str) -> None:
    assert numbers(text) and all(float(n) for n in numbers(text))
