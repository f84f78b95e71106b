"""Environment defaults of the `rft` command, set before Prefect is imported (it reads them at import).

A user's own values win. The temporary Prefect server of `rft run` sends no telemetry (its heartbeat
raced the server's start-up writes: a `database is locked` traceback on every run), and waits on the
Prefect API are bounded (a request times out after 30 s, and is retried 3 times: ~14 s of backoff;
Prefect's defaults are 60 s and 5 retries, ~1 minute of backoff).
"""

from __future__ import annotations

import os

DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_API_REQUEST_TIMEOUT": "30",
    "PREFECT_CLIENT_MAX_RETRIES": "3",
}


def apply() -> None:
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)
