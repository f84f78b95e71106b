"""The experiment's small JSON records (summary, published weights versions, the restart tally, ...):
read with a default while absent, written so that a crash never leaves a half-written file that looks whole."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_json(path: Path, default: Any = None) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))


def write_text_atomic(path: Path, text: str) -> None:
    """Write-then-rename (the rename is atomic on one filesystem)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
