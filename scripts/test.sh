#!/usr/bin/env bash
# Installs everything the tests need (scripts/setup.sh, idempotent) and runs the whole suite:
# real Prefect, Ray, vLLM (CPU), the torch trainer and MLflow. Extra arguments go to pytest.
#   scripts/test.sh --full   adds the extended tests (marked `full`: whole learning runs, a two-node Ray cluster,
#                            longer Tinker runs);
#   scripts/test.sh --ci     what CI runs (.ci/run): the default tests, then one half of the `full` ones
#                            (tests/full_shards.py, chosen by the parity of the last commit's hash) when the default ones
#                            ended early enough for the half to end within CI's 90 minutes (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTEST=(.venv/bin/python -m pytest -q -p no:cacheprovider --durations=30)  # the 30 slowest, for CI's time budget
HALF_BY_MINUTE=40  # the half takes ~0.6 of the default run's time (764 s against 1,334 s): it ends by ~65 min
mode=default
case "${1:-}" in
  --full) shift; export RFT_TEST_FULL=1 ;;
  --ci) shift; mode=ci ;;
esac
scripts/setup.sh
.venv/bin/ruff check --quiet .  # lint (pyproject.toml [tool.ruff]): unused names, import order, line length
[[ $mode == ci ]] || exec "${PYTEST[@]}" "$@"

"${PYTEST[@]}" "$@"
if (( SECONDS > HALF_BY_MINUTE * 60 )); then
  echo "CI: the default tests ended at minute $((SECONDS / 60)), past $HALF_BY_MINUTE: no half of the full tests this time"
  exit 0
fi
# the hash, not the commit count: a shallow clone has the one commit, and would always run the same half
commit=$(git rev-parse HEAD 2>/dev/null || echo 0)
export RFT_TEST_FULL_HALF=$((16#${commit: -1} % 2))
echo "CI: half $RFT_TEST_FULL_HALF of the full tests (tests/full_shards.py; commit ${commit:0:12})"
exec "${PYTEST[@]}" -m full "$@"
