#!/usr/bin/env bash
# Stops what scripts/up.sh started (worker and the runs it started, Prefect server, MLflow UI).
# Data stays in .rft/ and checkpoints/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stack.sh
for name in prefect-worker prefect-server mlflow-ui; do
  if running "$name"; then
    pid="$(cat "$RFT_STATE/pids/$name.pid")"
    pkill -TERM -P "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      pkill -KILL -P "$pid" 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "stopped $name ($pid)"
  fi
  rm -f "$RFT_STATE/pids/$name.pid"
done
