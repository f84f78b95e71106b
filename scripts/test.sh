#!/usr/bin/env bash
# Installs everything the tests need (scripts/setup.sh, idempotent) and runs the whole suite:
# real Prefect, Ray, vLLM (CPU), the torch trainer and MLflow. Extra arguments go to pytest.
#   scripts/test.sh --full   adds the extended tests (marked `full`: whole learning runs, a two-node Ray cluster,
#                            longer Tinker runs);
#   scripts/test.sh --ci     what CI runs (.ci/run): the default tests, then the `full` ones in their two halves
#                            (tests/full_shards.py), each in its own pytest process and only while it can still end
#                            within CI's 90 minutes; the half that goes first is chosen by the parity of the last
#                            commit's hash, so that a slow machine that runs one half still covers both over two stops
#                            (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTEST=(.venv/bin/python -m pytest -q -p no:cacheprovider --durations=30)  # the 30 slowest, for CI's time budget
# Two pytest-xdist workers, a module to a worker at a time (a module's shared runs stay one run), longest module
# first (tests/longest_first.py): a test waits on servers and subprocesses about a third of the time, and the other
# worker fills it. RFT_TEST_WORKERS=1 runs them in one process (docs/testing.md).
WORKERS="${RFT_TEST_WORKERS:-2}"
(( WORKERS > 1 )) && PYTEST+=(-n "$WORKERS" --dist loadfile --no-loadscope-reorder)
# A half takes ~0.6 of the default run's time (733–914 s against 1,334–1,409 s here): started by minute 40 the first ends
# by ~65 on a machine 1.7x slower than this one; started by minute 58 the second ends by ~75 on one as fast.
HALF_BY_MINUTE=(40 58)  # the first half to run, then the second
mode=default
case "${1:-}" in
  --full) shift; export RFT_TEST_FULL=1 ;;
  --ci) shift; mode=ci ;;
esac
scripts/setup.sh
.venv/bin/ruff check --quiet .  # lint (pyproject.toml [tool.ruff]): unused names, import order, line length
[[ $mode == ci ]] || exec "${PYTEST[@]}" "$@"

"${PYTEST[@]}" "$@"
# the hash, not the commit count: a shallow clone has the one commit, and would always start with the same half
commit=$(git rev-parse HEAD 2>/dev/null || echo 0)
first=$((16#${commit: -1} % 2))
status=0
for turn in 0 1; do
  half=$(((first + turn) % 2)) by=${HALF_BY_MINUTE[turn]}
  if (( SECONDS > by * 60 )); then
    echo "CI: minute $((SECONDS / 60)) is past $by: half $half of the full tests (tests/full_shards.py) is not run this time"
    continue
  fi
  echo "CI: half $half of the full tests (tests/full_shards.py; commit ${commit:0:12}), from minute $((SECONDS / 60))"
  RFT_TEST_FULL_HALF=$half "${PYTEST[@]}" -m full "$@" || status=$?
done
exit $status
