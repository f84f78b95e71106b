#!/usr/bin/env bash
# From a fresh clone to a finished run: install, start a local Prefect server, a process worker and
# the MLflow UI, deploy prefect.yaml, then run a deployment (default rft/gsm8k) and watch it.
# Re-running it is harmless: what is already up stays up. scripts/down.sh stops it all.
#   scripts/up.sh [DEPLOYMENT] [--param key=value ...] [--events]     e.g. scripts/up.sh smoke
set -euo pipefail
cd "$(dirname "$0")/.."
DEPLOYMENT="gsm8k"
if [[ $# -gt 0 && "$1" != --* ]]; then DEPLOYMENT="$1"; shift; fi

scripts/setup.sh
source scripts/stack.sh
BIN="$PWD/.venv/bin"

wait_for() {  # wait_for URL NAME LOG
  for _ in $(seq 1 180); do
    if curl -fsS "$1" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  echo "$2 did not come up; its log: $3" >&2
  tail -20 "$3" >&2
  exit 1
}

if ! running prefect-server; then
  echo "==> starting the Prefect server on $PREFECT_UI_URL"
  nohup "$BIN/prefect" server start --host 127.0.0.1 --port "$PREFECT_PORT" \
    >"$RFT_STATE/logs/prefect-server.log" 2>&1 &
  echo $! >"$RFT_STATE/pids/prefect-server.pid"
fi
wait_for "$PREFECT_API_URL/health" "the Prefect server" "$RFT_STATE/logs/prefect-server.log"

"$BIN/prefect" work-pool inspect "$WORK_POOL" >/dev/null 2>&1 \
  || "$BIN/prefect" work-pool create "$WORK_POOL" --type process >/dev/null
if ! "$BIN/prefect" work-pool inspect rft-gpu >/dev/null 2>&1; then
  "$BIN/prefect" work-pool create rft-gpu --type process >/dev/null
  # its worker runs on a GPU machine of the Ray cluster, not here (docs/gpu.md)
  echo "==> work pool rft-gpu created; on a GPU machine: PREFECT_API_URL=$PREFECT_API_URL prefect worker start --pool rft-gpu --type process"
fi

if ! running prefect-worker; then
  # runs a dead worker of this pool left behind would hold their slots forever (healthy workers keep theirs)
  "$BIN/python" scripts/reap_runs.py --pool "$WORK_POOL"
  echo "==> starting a process worker on work pool $WORK_POOL"
  nohup "$BIN/prefect" worker start --pool "$WORK_POOL" --type process \
    >"$RFT_STATE/logs/prefect-worker.log" 2>&1 &
  echo $! >"$RFT_STATE/pids/prefect-worker.pid"
fi

MLFLOW_DB="$PWD/checkpoints/mlflow.db"
mkdir -p "$PWD/checkpoints"
if ! running mlflow-ui; then
  echo "==> starting the MLflow UI on $RFT_MLFLOW_UI_URL"
  nohup "$BIN/mlflow" ui --backend-store-uri "sqlite:///$MLFLOW_DB" --host 127.0.0.1 --port "$MLFLOW_PORT" \
    >"$RFT_STATE/logs/mlflow-ui.log" 2>&1 &
  echo $! >"$RFT_STATE/pids/mlflow-ui.pid"
fi
wait_for "$RFT_MLFLOW_UI_URL/health" "the MLflow UI" "$RFT_STATE/logs/mlflow-ui.log"

echo "==> deploying prefect.yaml"
"$BIN/python" -m deployments.prefect_yaml --check
"$BIN/prefect" --no-prompt deploy --all >"$RFT_STATE/logs/deploy.log" 2>&1 \
  || { tail -30 "$RFT_STATE/logs/deploy.log" >&2; exit 1; }

# The run's live view (rft watch: stage, step i/N, reward, evaluation before -> after, ETA); --events: Prefect's
# raw event stream instead.
EVENTS=0
ARGS=()
for arg in "$@"; do if [[ "$arg" == --events ]]; then EVENTS=1; else ARGS+=("$arg"); fi; done
echo "==> running rft/$DEPLOYMENT (watch it at $PREFECT_UI_URL/runs)"
if [[ $EVENTS == 1 ]]; then
  "$BIN/prefect" deployment run "rft/$DEPLOYMENT" --watch "${ARGS[@]}"
else
  STARTED=$("$BIN/prefect" deployment run "rft/$DEPLOYMENT" "${ARGS[@]}")
  FLOW_RUN=$(awk '/UUID/ {print $NF}' <<<"$STARTED")
  "$BIN/rft" watch "$FLOW_RUN"
fi

"$BIN/python" - "$DEPLOYMENT" "${FLOW_RUN:-FLOW_RUN}" <<'PY'
import json, os, sys
from deployments import load_recipe
from pathlib import Path
from tasks.evaluate import before_label, comparison_text
# Each flow run of a deployment is its own experiment, {name}-{flow run name}: take the newest. A recipe with
# stages keeps a summary per stage ({experiment}/{stage}/summary.json), each with its own before -> after.
recipe = load_recipe(sys.argv[1])
stage_dirs = [s.name.rsplit("/", 1)[-1] for s in recipe.resolve_stages()] if recipe.stages else [""]
found = [p for d in stage_dirs for p in recipe.experiment_dir.resolve().parent.glob(f"{recipe.name}-*/{Path(d, 'summary.json')}")]
newest = max(found, key=os.path.getmtime)
run_dir = newest.parent.parent if recipe.stages else newest.parent
summaries = [(d, json.loads((run_dir / d / "summary.json").read_text())) for d in stage_dirs if (run_dir / d / "summary.json").exists()]
summary = summaries[-1][1]
print()
if summary.get("stopped"):  # a budget: resumable from its checkpoint
    sys.exit(print(f"stopped after step {summary['steps']}/{summary['planned_steps']}: {summary['stopped']}. To continue "
                   f"from there under a larger budget: .venv/bin/rft retry {sys.argv[2]} --set budget."
                   + ("max_wall_minutes=M" if "wall-time" in summary["stopped"] else "max_tokens=N")) or 0)
print(f"Prefect UI : {os.environ['PREFECT_UI_URL']}")
print(f"MLflow UI  : {summary['mlflow_url']}")
print(f"model      : {summary['final_model']}")
print(f"curve      : {summary['reward_curve']}")
for i, (stage, stage_summary) in enumerate(summaries):
    for name, metrics in stage_summary["eval"].items():
        print(f"\n{(stage + ': ') if stage else ''}{name}: {int(metrics['tasks'])} held-out tasks (strict: right and in the "
              "asked form; lenient: right anywhere; format: in the asked form)")
        print(comparison_text(stage_summary.get("eval_at_start", {}).get(name), metrics, "after training", before_label(i)))
gate_file = run_dir / stage_dirs[-1] / "gate.json"  # the promotion gate's decision (monitor.gate)
if gate_file.exists():
    g = json.loads(gate_file.read_text())
    print(f"\npromotion gate ({g['metric']}): "
          + (f"version {g['version']} takes '{g['alias']}'" if g["promoted"] else f"'{g['alias']}' stays") + f". {g['reason']}")
print()
print(f"Evaluate any model the same way: .venv/bin/rft eval {summary['final_model']} --recipe {sys.argv[1]}")
print(f"To use the Prefect CLI against this server: export PREFECT_API_URL={os.environ['PREFECT_API_URL']}")
PY
