#!/usr/bin/env bash
# Installs everything the tests need (scripts/setup.sh, idempotent) and runs the whole suite:
# real Prefect, Ray, vLLM (CPU), the torch trainer and MLflow. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
