# Shared settings of scripts/up.sh and scripts/down.sh (sourced, not run).
RFT_STATE="${RFT_STATE:-$PWD/.rft}"
PREFECT_PORT="${PREFECT_PORT:-4200}"
MLFLOW_PORT="${MLFLOW_PORT:-5000}"
WORK_POOL="${WORK_POOL:-rft-cpu}"
export PREFECT_HOME="${PREFECT_HOME:-$RFT_STATE/prefect}"
export PREFECT_API_URL="http://127.0.0.1:$PREFECT_PORT/api"
export PREFECT_UI_URL="http://127.0.0.1:$PREFECT_PORT"
export RFT_MLFLOW_UI_URL="http://127.0.0.1:$MLFLOW_PORT"
# No telemetry from the servers we start; bounded waits on the Prefect API (a request: 30 s, 3 retries,
# ~14 s of backoff) and on MLflow (10 s, 2 retries) for the worker and the runs it starts.
export PREFECT_SERVER_ANALYTICS_ENABLED="${PREFECT_SERVER_ANALYTICS_ENABLED:-false}"
export DO_NOT_TRACK="${DO_NOT_TRACK:-1}"  # and none from the Prefect clients (whose first-run notice up.sh printed)
export PREFECT_API_REQUEST_TIMEOUT="${PREFECT_API_REQUEST_TIMEOUT:-30}"
export PREFECT_CLIENT_MAX_RETRIES="${PREFECT_CLIENT_MAX_RETRIES:-3}"
export MLFLOW_HTTP_REQUEST_TIMEOUT="${MLFLOW_HTTP_REQUEST_TIMEOUT:-10}"
export MLFLOW_HTTP_REQUEST_MAX_RETRIES="${MLFLOW_HTTP_REQUEST_MAX_RETRIES:-2}"
mkdir -p "$RFT_STATE/logs" "$RFT_STATE/pids"

running() {  # running NAME: is the process of that pid file alive?
  local pidfile="$RFT_STATE/pids/$1.pid"
  [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}
