"""Test-wide isolation: a private Prefect home (never the user's database) and no inherited servers."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Before anything imports prefect: settings are read at import time.
_PREFECT_HOME = Path(tempfile.mkdtemp(prefix="rft-test-prefect-"))
os.environ["PREFECT_HOME"] = str(_PREFECT_HOME)
for _var in ("PREFECT_API_URL", "PREFECT_PROFILE", "MLFLOW_TRACKING_URI", "RAY_ADDRESS"):
    os.environ.pop(_var, None)
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
# The servers tests start (temporary and real) send no telemetry; the Prefect API's waits are bounded.
from cli import defaults  # noqa: E402

defaults.apply()
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_unconfigure(config: object) -> None:
    """Prefect stops its temporary server at exit and logs that to a stream pytest has closed by then;
    logging would print a traceback for it ('I/O operation on closed file')."""
    import logging

    logging.raiseExceptions = False
