"""A model folder built in private and renamed into place: readers never see half of one."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def building_once(target: Path) -> Iterator[Path]:
    """A private folder beside `target` to build a model folder in, renamed to `target` when the block ends:
    concurrent builders never see half a folder, and the loser of a race just discards its copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        yield tmp
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
