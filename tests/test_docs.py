"""The README stays short, every number it states points at where it was measured, and no link in the
README or docs/ leads nowhere. Reads markdown only: no Prefect, Ray or model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted([README, *ROOT.glob("docs/**/*.md")])
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = CODE_SPAN.sub(lambda m: m.group(0)[1:-1], heading.strip().lstrip("#").strip()).lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def anchors(path: Path) -> set[str]:
    return {slug(text) for _, text in prose_lines(path) if re.match(r"#{1,6}\s", text)}


def test_readme_is_under_200_lines() -> None:
    assert len(README.read_text().splitlines()) < 200


def test_readme_opens_with_the_two_commands() -> None:
    """The first thing after the title: the main job and the tests, each a script that exists."""
    first_block = README.read_text().split("```")[1]
    commands = [line.split()[0] for line in first_block.splitlines()[1:] if line.strip()]
    assert commands == ["scripts/up.sh", "scripts/test.sh"]
    assert all((ROOT / c).is_file() for c in commands)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Relative links of `page` to a missing file, a missing heading, or outside `root`."""
    broken = []
    for number, line in prose_lines(page):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"[a-z]+:", target):  # http(s), mailto: not ours to check offline
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.name}:{number}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{where} (no heading #{anchor})")
            elif not resolved.is_relative_to(root):
                broken.append(f"{where} (outside the repository)")
    return broken


def unlinked_numbers(page: Path) -> list[str]:
    """Lines stating a number (outside code) with no link on them."""
    unlinked = []
    for number, line in prose_lines(page):
        tokens = re.findall(r"[\w.\-]+", CODE_SPAN.sub("", LINK.sub("", line)))
        stated = any(re.search(r"\d", t) and not re.search(r"[A-Za-z]", t) for t in tokens)
        if stated and not LINK.search(line):
            unlinked.append(f"{page.name}:{number}: {line.strip()}")
    return unlinked


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    assert not (broken := broken_links(page)), "\n".join(broken)


def test_every_number_in_the_readme_sits_beside_a_link() -> None:
    """The README states no number without the file that holds it (a run page, a measurement, a test,
    a recipe): a line with a number outside code carries a link."""
    assert not (unlinked := unlinked_numbers(README)), "\n".join(unlinked)


def missing_code_names(page: Path) -> list[str]:
    """`path/to/module.py` and `path/to/module.py:name` in code spans whose file, or whose name in it (a def, a
    class or an assignment; `Class.method` part by part), is not there: the docs follow the code."""
    missing = []
    for number, line in prose_lines(page):
        for path, name in re.findall(r"`([\w./-]+/[\w.-]+\.py)(?::([\w.]+))?`", line):
            file = ROOT / path
            if not file.is_file():
                missing.append(f"{page.name}:{number}: {path} (no such file)")
                continue
            source = file.read_text()
            for part in name.split(".") if name else []:
                if not re.search(rf"^\s*(def|class)\s+{part}\b|^\s*{part}\s*[:=]", source, re.M):
                    missing.append(f"{page.name}:{number}: {path}:{name} ({part} is not defined there)")
    return missing


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_module_and_name_the_docs_cite_exists(page: Path) -> None:
    assert not (missing := missing_code_names(page)), "\n".join(missing)


def test_the_checks_find_a_broken_link_and_an_unlinked_number(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "runs.md").write_text("# Runs\n\n## The runs\n")
    (tmp_path / "outside.md").write_text("# Outside\n")
    page = repo / "docs" / "page.md"
    page.write_text(
        "# Title\n\nReaches 0.42 ([runs](runs.md#the-runs)).\nTook 28 minutes.\n\n"
        "[gone](nowhere.md), [no heading](runs.md#nothing-here), [here](#title), [up](../../outside.md)\n\n"
        "```\n123 in code, [x](nowhere-in-code.md)\n```\n`rft run --set steps=5` on Llama-3.2-3B\n"
        "`flows/rl.py:take_turns`, `flows/rl.py:no_such_step`, `flows/gone.py`, `backends/policy.py:Policy.sync`\n"
    )
    assert unlinked_numbers(page) == ["page.md:4: Took 28 minutes."]
    assert broken_links(page, root=repo) == [
        "page.md:6: nowhere.md (no such file)",
        "page.md:6: runs.md#nothing-here (no heading #nothing-here)",
        "page.md:6: ../../outside.md (outside the repository)",
    ]
    assert missing_code_names(page) == [
        "page.md:12: flows/rl.py:no_such_step (no_such_step is not defined there)",
        "page.md:12: flows/gone.py (no such file)",
    ]
