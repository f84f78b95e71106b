#!/usr/bin/env bash
# Stops what scripts/up.sh started (worker, Prefect server, MLflow UI). Data stays in .rft/ and checkpoints/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stack.sh
for name in prefect-worker prefect-server mlflow-ui; do
  if running "$name"; then
    pid="$(cat "$RFT_STATE/pids/$name.pid")"
    pkill -TERM -P "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    echo "stopped $name ($pid)"
  fi
  rm -f "$RFT_STATE/pids/$name.pid"
done
