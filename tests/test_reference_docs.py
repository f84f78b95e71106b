"""docs/settings.md and the tables of docs/trinity-parity.md are what deployments/reference_docs/ writes from the
schema and its registries (issue 72): a committed page that differs fails here, naming the command that rewrites it.
Reads the schema only (no Ray, vLLM or torch)."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

from deployments import reference_docs
from schemas import ExperimentConfig, schema_walk

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = ".venv/bin/python -m deployments.reference_docs"


@pytest.fixture(scope="module")
def pages() -> dict[Path, str]:
    return reference_docs.pages()


@pytest.mark.parametrize("page", [reference_docs.SETTINGS_PAGE, reference_docs.PARITY_PAGE],
                         ids=lambda p: p.name)
def test_the_committed_page_is_what_the_generator_writes(pages: dict[Path, str], page: Path) -> None:
    committed = page.read_text()
    diff = "".join(list(difflib.unified_diff(committed.splitlines(True), pages[page].splitlines(True),
                                             "committed", "generated", n=0))[:20])
    assert committed == pages[page], f"{page.relative_to(ROOT)} is out of date: run {REGENERATE}\n{diff}"


def test_the_generator_writes_the_same_pages_twice(pages: dict[Path, str]) -> None:
    assert reference_docs.pages() == pages


def test_the_settings_page_has_a_row_for_every_setting(pages: dict[Path, str]) -> None:
    text = pages[reference_docs.SETTINGS_PAGE]
    missing = [node.key for node in schema_walk.walk(ExperimentConfig)  # a row's setting, or a nested one's last part
               if node.kind == "field" and f"`{node.leaf}`" not in text and f".{node.leaf}`" not in text]
    assert not missing, missing


def test_a_refusal_is_shown_with_its_reason_and_a_trainer_s_own_rule_with_the_trainer(pages: dict[Path, str]) -> None:
    rows = pages[reference_docs.SETTINGS_PAGE].splitlines()
    warmup = next(r for r in rows if r.startswith("| `trainer_input.sft_warmup_dataset` |"))
    assert "**refused**: Trinity's old warm-up is not run" in warmup
    masking = next(r for r in rows if r.startswith("| ↳ `enable_sequence_masking` |"))
    assert "on `verl`: **refused**: veRL's ppo loss has no sequence masking" in masking


def test_every_parity_block_is_rewritten_and_a_missing_one_is_an_error() -> None:
    text = reference_docs.PARITY_PAGE.read_text()
    for name in reference_docs.PARITY_BLOCKS:
        assert f"<!-- BEGIN GENERATED: {name} " in text and f"<!-- END GENERATED: {name} -->" in text
    stripped = text.replace("<!-- END GENERATED: rewards -->", "")
    with pytest.raises(ValueError, match="generated blocks"):
        reference_docs.render_parity(stripped)


def test_a_note_on_a_name_the_registries_do_not_have_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(reference_docs.PRESET_NOTES, "no_such_preset", "a note")
    with pytest.raises(ValueError, match="no_such_preset"):
        reference_docs.render_parity(reference_docs.PARITY_PAGE.read_text())


def test_the_generator_imports_no_ray_vllm_or_torch() -> None:
    probe = ("import sys, deployments.reference_docs as r; r.pages(); "
             "print(sorted(m for m in ('ray', 'vllm', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
