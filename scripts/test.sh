#!/usr/bin/env bash
# Installs everything the tests need (scripts/setup.sh, idempotent) and runs the whole suite:
# real Prefect, Ray, vLLM (CPU), the torch trainer and MLflow. Extra arguments go to pytest.
#   scripts/test.sh --full   adds the extended tests (marked `full`: whole learning runs, a two-node Ray cluster,
#                            longer Tinker runs);
#   scripts/test.sh --ci     what CI runs (.ci/run): the default tests, then the `full` ones in their two halves
#                            (tests/full_shards.py), each in its own pytest process; a half that would not end within
#                            CI's 90 minutes (judged by how long the default tests took) is not started and the run
#                            fails, naming it: CI passes only when every test ran (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTEST=(.venv/bin/python -m pytest -q -p no:cacheprovider --durations=30)  # the 30 slowest, for CI's time budget
# Two pytest-xdist workers, a module to a worker at a time (a module's shared runs stay one run), longest module
# first (tests/longest_first.py): a test waits on servers and subprocesses about a third of the time, and the other
# worker fills it. RFT_TEST_WORKERS=1 runs them in one process (docs/testing.md).
# The `full` tests (--full, CI's halves) too, since the self-healing test's faults hold beside another worker.
XDIST=(--dist loadfile --no-loadscope-reorder)
WORKERS="${RFT_TEST_WORKERS:-2}"
mode=default
case "${1:-}" in
  --full) shift; export RFT_TEST_FULL=1; mode=full ;;
  --ci) shift; mode=ci ;;
esac
(( WORKERS > 1 )) && PYTEST+=(-n "$WORKERS" "${XDIST[@]}")
# On two workers the halves of the `full` tests took 0.75 and 0.52 of the default tests' time (docs/testing.md); a
# half starts only when, at 0.85 of the default tests' seconds here, it ends by minute 85.
HALF_SHARE_PCT=85 END_BY_MINUTE=85
scripts/setup.sh
.venv/bin/ruff check --quiet .  # lint (pyproject.toml [tool.ruff]): unused names, import order, line length
[[ $mode == default ]] && exec "${PYTEST[@]}" "$@"
# A whole run (--full, --ci) records which settings the runtime reads, in every process (schemas/read_trace.py); at
# the end, a setting of the schema that no run read, and that is not refused or warned, fails it
# (tests/settings_reads.py): the evidence that every accepted setting is honoured.
RFT_TRACE_SETTINGS="$(mktemp -d "${TMPDIR:-/tmp}/rft-settings-reads.XXXXXX")"
export RFT_TRACE_SETTINGS
check_reads() { .venv/bin/python -m tests.settings_reads "$RFT_TRACE_SETTINGS"; }
if [[ $mode == full ]]; then
  status=0
  "${PYTEST[@]}" "$@" || status=$?
  check_reads || status=1
  exit $status
fi

default_start=$SECONDS
"${PYTEST[@]}" "$@"
half_s=$(((SECONDS - default_start) * HALF_SHARE_PCT / 100))
# the hash, not the commit count: a shallow clone has the one commit, and would always start with the same half
commit=$(git rev-parse HEAD 2>/dev/null || echo 0)
first=$((16#${commit: -1} % 2))
status=0
for turn in 0 1; do
  half=$(((first + turn) % 2))
  if (( SECONDS + half_s > END_BY_MINUTE * 60 )); then
    # a pass must mean every test ran: a half that cannot fit fails the run, named, instead of being skipped
    echo "CI: FAILED: at minute $((SECONDS / 60)), half $half of the full tests (tests/full_shards.py; ~$((half_s / 60)) min)" \
         "would end past minute $END_BY_MINUTE: not run, so this CI run fails (make the tests cheaper, not fewer)"
    status=1
    continue
  fi
  echo "CI: half $half of the full tests (tests/full_shards.py; commit ${commit:0:12}), from minute $((SECONDS / 60))," \
       "~$((half_s / 60)) min"
  RFT_TEST_FULL_HALF=$half "${PYTEST[@]}" -m full "$@" || status=$?
done
(( status == 0 )) && { check_reads || status=1; }  # only when every test ran: a partial run reads less
exit $status
