#!/usr/bin/env bash
# Installs everything the tests need (scripts/setup.sh, idempotent) and runs the whole suite:
# real Prefect, Ray, vLLM (CPU), the torch trainer and MLflow. Extra arguments go to pytest.
# `scripts/test.sh --full` adds the extended tests (marked `full`: a whole learning run, a two-node Ray
# cluster, longer Tinker runs); the default run is what CI runs (its time: docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--full" ]]; then shift; export RFT_TEST_FULL=1; fi
scripts/setup.sh
.venv/bin/ruff check --quiet .  # lint (pyproject.toml [tool.ruff]): unused names, import order, line length
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=30 "$@"  # the 30 slowest, for CI's time budget (docs/testing.md)
