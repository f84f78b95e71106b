"""Test-wide isolation: a private Prefect home (never the user's database) and no inherited servers."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Before anything imports prefect: settings are read at import time.
_PREFECT_HOME = Path(tempfile.mkdtemp(prefix="rft-test-prefect-"))
os.environ["PREFECT_HOME"] = str(_PREFECT_HOME)
for _var in ("PREFECT_API_URL", "PREFECT_PROFILE", "MLFLOW_TRACKING_URI", "RAY_ADDRESS",
             "TINKER_BASE_URL", "TINKER_API_KEY", "TRINITY_API_KEY"):
    os.environ.pop(_var, None)
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
# The servers tests start (temporary and real) send no telemetry; the Prefect API's waits are bounded.
from cli import defaults  # noqa: E402

defaults.apply()
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


FULL_TEST_TIMEOUT_S = 3600


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules run longest first, so that the workers of scripts/test.sh end near together (tests/longest_first.py).
    Tests marked `full` run only in the extended run (scripts/test.sh --full, RFT_TEST_FULL=1); CI's run
    (scripts/test.sh --ci) runs them in two pytest processes, each with RFT_TEST_FULL_HALF set to one half
    (tests/full_shards.py; their times: docs/testing.md)."""
    from tests.full_shards import half_of
    from tests.longest_first import longest_first

    items[:] = longest_first(items)
    for item in items:  # pyproject's timeout is the default tests'; an extended whole run gets longer
        if "full" in item.keywords and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(FULL_TEST_TIMEOUT_S))
    half = os.environ.get("RFT_TEST_FULL_HALF")
    if os.environ.get("RFT_TEST_FULL") and half is None:
        return
    skip = pytest.mark.skip(reason="extended test (minutes): scripts/test.sh --full")
    other_half = pytest.mark.skip(reason=f"extended test outside half {half} (tests/full_shards.py): CI runs it in its "
                                         "other pytest process; scripts/test.sh --full runs it")
    for item in items:
        if "full" not in item.keywords:
            continue
        if half is None:
            item.add_marker(skip)
        elif half_of(item.path) not in (int(half), None):
            item.add_marker(other_half)


def pytest_unconfigure(config: object) -> None:
    """Prefect stops its temporary server at exit and logs that to a stream pytest has closed by then;
    logging would print a traceback for it ('I/O operation on closed file')."""
    import logging

    logging.raiseExceptions = False


@pytest.fixture(scope="module")
def module_tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder for a module's fixtures (whole runs, GBs of checkpoints), removed when the module ends with
    no failed test: what pyproject's retention policy "failed" does for tmp_path, at the module's scope."""
    path = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    failed = request.session.testsfailed
    yield path
    if request.session.testsfailed == failed:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    """tests/tiny_model.py's model, built once into the model cache (RFT_CACHE_DIR) beside SmolLM2's conversion."""
    from checkpointing.models import model_cache_dir
    from tests.tiny_model import tiny_model

    return str(tiny_model(model_cache_dir() / "rft-tests" / "tiny-smollm2-v1"))


# ----------------------------------------------------------------------------- the local Tinker server
TINKER_TEST_KEY = "tml-rft-tests"  # the server refuses any other key, as the hosted service would


@pytest.fixture(scope="module")
def tinker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """scripts/tinker-server.sh started once for the module that uses it, tests/test_tinker.py
    (installing its venv first when it is missing: a clean clone, CI) under a temporary RFT_STATE;
    stopped when that module ends, so its ~5 GB are free for the modules after it. $RFT_TEST_TINKER_URL
    names a running one instead (development: one server for many test runs)."""
    import subprocess

    if os.environ.get("RFT_TEST_TINKER_URL"):  # a server already running (started with TINKER_SERVER_API_KEY=tml-rft-tests)
        yield {"TINKER_BASE_URL": os.environ["RFT_TEST_TINKER_URL"], "TINKER_API_KEY": TINKER_TEST_KEY, "log": ""}
        return
    root = Path(__file__).resolve().parent.parent
    state = tmp_path_factory.mktemp("tinker-state")
    env = {**os.environ, "RFT_STATE": str(state), "TINKER_SERVER_API_KEY": TINKER_TEST_KEY,
           # room for four training clients at rank ≤ 16 (a killed run's slot is freed after the session timeout)
           "TINKER_SERVER_MAX_ADAPTERS": "5", "TINKER_SERVER_MAX_RANK": "16",
           # the venv outlives the session (installing it takes minutes): the repo's own unless one is given
           "TINKER_SERVER_VENV": os.environ.get("TINKER_SERVER_VENV", str(root / ".rft" / "tinker-server" / "venv"))}
    script = str(root / "scripts" / "tinker-server.sh")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=1800)
    venv = Path(env["TINKER_SERVER_VENV"])
    if started.returncode != 0 and not (venv / ".tinker-server-installed").is_file():
        # fails, never skips: a suite that passes without its Tinker tests would say they passed (issue 74)
        pytest.fail(f"the Tinker server's venv could not be installed into {venv} (no package index?):\n"
                    f"{started.stdout[-1500:]}\n{started.stderr[-1500:]}")
    if started.returncode != 0:
        raise RuntimeError(f"scripts/tinker-server.sh start failed:\n{started.stdout[-3000:]}\n{started.stderr[-3000:]}")
    url = next(line.split("=", 1)[1] for line in started.stdout.splitlines() if line.startswith("export TINKER_BASE_URL="))
    try:
        yield {"TINKER_BASE_URL": url, "TINKER_API_KEY": TINKER_TEST_KEY, "log": str(state / "tinker-server" / "server.log")}
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=120)

