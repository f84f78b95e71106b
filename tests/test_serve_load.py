"""benchmarks/serve_load.py, short: concurrent openai clients on one engine's endpoint (loopback, API key on)
get answers with no errors while batch rollouts on the same engine finish; no key, 401; the key in no log."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def test_endpoint_under_load_keeps_serving_batch_rollouts(tmp_path: Path) -> None:
    out = tmp_path / "serve_load.json"
    key = secrets.token_urlsafe(24)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serve_load.py"), "--clients", "4", "--seconds",
                           "6", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "RFT_LOAD_TEST_API_KEY": key, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["unauthenticated_status"] == 401
    assert result["errors"] == 0 and result["requests"] > 0
    assert result["batch_rollouts"]["finished"] > 0
    assert result["key_in_logs"] is False
    assert key not in done.stdout + done.stderr + out.read_text()  # vLLM's own output included
    assert result["latency_p99_s"] >= result["latency_p50_s"] > 0
