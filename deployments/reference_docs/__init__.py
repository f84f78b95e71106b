"""docs/settings.md and the generated blocks of docs/trinity-parity.md, written from the schema and its registries (as
prefect.yaml is from the recipes and docs/algorithm-matrix.md from the backends' rules); tests/test_reference_docs.py
fails when a committed page differs from what this writes.

    .venv/bin/python -m deployments.reference_docs            # rewrite both pages
    .venv/bin/python -m deployments.reference_docs --check    # exit 1 if either is out of date

settings_page.py writes the settings page whole, parity_page.py the parity page's blocks, both with markdown.py's
helpers. Only the schema is imported (no Ray, vLLM or torch), and nothing is validated, so a page is cheap to
regenerate after a schema change.
"""

from __future__ import annotations

from pathlib import Path

from deployments.reference_docs.markdown import COMMAND, ROOT
from deployments.reference_docs.parity_page import FUNCTION_NOTES, PARITY_BLOCKS, PARITY_PAGE, PRESET_NOTES, render_parity
from deployments.reference_docs.settings_page import SETTINGS_PAGE, render_settings

__all__ = ["COMMAND", "FUNCTION_NOTES", "PARITY_BLOCKS", "PARITY_PAGE", "PRESET_NOTES", "ROOT", "SETTINGS_PAGE", "pages",
           "render_parity", "render_settings"]


def pages() -> dict[Path, str]:
    """Each page's path and the text it should have."""
    return {SETTINGS_PAGE: render_settings(), PARITY_PAGE: render_parity(PARITY_PAGE.read_text())}
