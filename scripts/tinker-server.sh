#!/usr/bin/env bash
# A self-hosted Tinker-compatible server for development and tests: PyPI `skyrl` (skyrl.tinker.api,
# JAX on CPU) serving the embedded default model on 127.0.0.1, in its own venv under the state folder.
#   scripts/tinker-server.sh start    install once, start, wait until it answers, print the `export` lines (URL; key tml-local unless TINKER_SERVER_API_KEY is set)
#   scripts/tinker-server.sh stop     stop everything `start` started
#   scripts/tinker-server.sh status   say whether it runs (and its URL)
# Settings (environment): RFT_STATE (default ./.rft), TINKER_SERVER_VENV (default
# $RFT_STATE/tinker-server/venv; point tests with their own RFT_STATE at an installed one),
# TINKER_SERVER_PORT (default: a free port),
# TINKER_SERVER_MODEL (default HuggingFaceTB/SmolLM2-135M-Instruct), TINKER_SERVER_MAX_ADAPTERS
# (default 4; the base model takes one slot, so 3 training clients at once), TINKER_SERVER_MAX_RANK (default 32),
# TINKER_SERVER_BACKEND_CONFIG (extra JSON merged into skyrl's --backend-config; by default training and
# sampling run in batches of 8 sequences, padded: one JAX compile per shape),
# TINKER_SERVER_API_KEY (if set, requests with another key get 401, like the hosted service),
# TINKER_SERVER_SESSION_TIMEOUT (seconds without a client heartbeat before skyrl unloads that
# session's models, default 120; the SDK beats every 10 s), TINKER_SERVER_SUM_LOSS (default 1, see
# scripts/tinker_server/sitecustomize.py), TINKER_SERVER_START_TIMEOUT (seconds, default 600).
# Log, database, checkpoints and pid file: $RFT_STATE/tinker-server/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stack.sh

SKYRL_VERSION="0.3.0"
# The server venv gets the same SDK as the project: tinker_proto_shim parses the SDK's protobuf
# requests with the SDK's own schema (tinker.proto), so the two must agree.
TINKER_SDK="tinker==0.38.0"
TORCH="torch==2.13.0+cpu"  # peft (a skyrl dependency) needs torch; unpinned it pulls CUDA wheels

DIR="$RFT_STATE/tinker-server"
VENV="${TINKER_SERVER_VENV:-$DIR/venv}"
PIDFILE="$DIR/server.pid"
PORTFILE="$DIR/server.port"
LOG="$DIR/server.log"
MODEL_ID="${TINKER_SERVER_MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}"
SUPPORT="scripts/tinker_server"

# The server runs as its own process group (setsid): it runs while any process of that group does.
running() { [[ -f "$PIDFILE" ]] && kill -0 -- "-$(cat "$PIDFILE")" 2>/dev/null; }
base_url() { echo "http://127.0.0.1:$(cat "$PORTFILE")"; }

setup_venv() {  # the server's venv, once; a stamp skips it while nothing it depends on changed
  local stamp="$VENV/.tinker-server-installed"
  local want
  want="$(echo "$SKYRL_VERSION $TINKER_SDK $TORCH" | sha256sum | cut -c1-16)"
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "==> installing skyrl $SKYRL_VERSION (JAX on CPU) into $VENV (a few minutes the first time)"
    [[ -x "$VENV/bin/python" ]] || "${PYTHON:-python3.11}" -m venv "$VENV"
    local pip=("$VENV/bin/pip" install -q)
    "${pip[@]}" "$TORCH" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    "${pip[@]}" "skyrl[tinker,jax]==$SKYRL_VERSION" "$TINKER_SDK" \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    echo "$want" >"$stamp"
  fi
  # Small support files, refreshed on every start: the `uv` stand-in, the import fix and the middleware.
  local site
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  install -m 755 "$SUPPORT/uv" "$VENV/bin/uv"
  install -m 644 "$SUPPORT/sitecustomize.py" "$SUPPORT/tinker_proto_shim.py" "$site/"
}

model_snapshot() {  # a Hugging Face cache entry for MODEL_ID pointing at its local folder (there is no hub)
  local folder="${RFT_CACHE_DIR:-$HOME/.cache/rft/models}/$MODEL_ID"
  if [[ ! -f "$folder/config.json" ]]; then
    folder="$("${RFT_VENV:-.venv}/bin/python" -c \
      'import sys; from checkpointing.models import resolve_model_path; print(resolve_model_path(sys.argv[1]))' "$MODEL_ID")"
  fi
  [[ -f "$folder/config.json" ]] || { echo "no local model folder for $MODEL_ID ($folder)" >&2; exit 1; }
  # skyrl resolves the model name through huggingface_hub.snapshot_download, which (offline) returns
  # refs/main's snapshot: the server then serves the model under its hub name, as the hosted service does.
  local repo="$DIR/hf/hub/models--${MODEL_ID//\//--}"
  mkdir -p "$repo/refs" "$repo/snapshots"
  printf local >"$repo/refs/main"
  ln -sfn "$(cd "$folder" && pwd)" "$repo/snapshots/local"
}

# What a client needs: the URL, and a key when the server takes any (the SDK refuses to start without one).
exports() {
  echo "export TINKER_BASE_URL=$(base_url)"
  if [[ -z "${TINKER_SERVER_API_KEY:-}" ]]; then echo "export TINKER_API_KEY=tml-local"; fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  if running; then
    echo "the tinker server already runs (pid $(cat "$PIDFILE"))"
    exports
    return 0
  fi
  mkdir -p "$DIR/checkpoints"
  setup_venv
  model_snapshot
  local port="${TINKER_SERVER_PORT:-$(free_port)}"
  local backend_config
  backend_config="$(python3 -c 'import json, sys
config = {"max_lora_adapters": int(sys.argv[1]), "max_lora_rank": int(sys.argv[2]),
          "train_micro_batch_size": 8, "sample_max_num_sequences": 8}  # fixed shapes: backends/tinker/losses.py
config.update(json.loads(sys.argv[3] or "{}"))
print(json.dumps(config))' "${TINKER_SERVER_MAX_ADAPTERS:-4}" "${TINKER_SERVER_MAX_RANK:-32}" \
    "${TINKER_SERVER_BACKEND_CONFIG:-}")"
  echo "==> starting the tinker server ($MODEL_ID) on 127.0.0.1:$port; log: $LOG"
  echo "$port" >"$PORTFILE"
  # setsid: the server, its uv stand-ins and its engine form one process group that `stop` ends.
  PATH="$VENV/bin:$PATH" HF_HUB_OFFLINE=1 HF_HUB_CACHE="$DIR/hf/hub" JAX_PLATFORMS=cpu COLUMNS=200 \
    TINKER_SERVER_PROTO_SHIM="${TINKER_SERVER_PROTO_SHIM:-1}" TINKER_SERVER_SUM_LOSS="${TINKER_SERVER_SUM_LOSS:-1}" \
    setsid "$VENV/bin/uv" run --extra tinker --extra jax -m skyrl.tinker.api \
    --base-model "$MODEL_ID" --host 127.0.0.1 --port "$port" \
    --database-url "sqlite:///$DIR/tinker.db" --checkpoints-base "$DIR/checkpoints" \
    --backend-config "$backend_config" --session-timeout-sec "${TINKER_SERVER_SESSION_TIMEOUT:-120}" \
    >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"

  # Ready = the API answers and the engine (a separate process) has loaded the model.
  local timeout="${TINKER_SERVER_START_TIMEOUT:-600}" t0=$SECONDS
  until curl -fsS "$(base_url)/api/v1/healthz" >/dev/null 2>&1 && grep -q "Starting background engine" "$LOG"; do
    if ! running; then
      echo "the tinker server exited while starting; its log ($LOG):" >&2
      tail -30 "$LOG" >&2
      rm -f "$PIDFILE"
      exit 1
    fi
    if (( SECONDS - t0 > timeout )); then
      echo "the tinker server did not come up within ${timeout}s; its log ($LOG):" >&2
      tail -30 "$LOG" >&2
      stop
      exit 1
    fi
    sleep 1
  done
  echo "==> the tinker server answers after $((SECONDS - t0))s"
  exports
}

stop() {
  if running; then
    local pid
    pid="$(cat "$PIDFILE")"
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    echo "stopped the tinker server ($pid)"
  else
    echo "the tinker server is not running"
  fi
  rm -f "$PIDFILE"
}

status() {
  if running; then
    echo "the tinker server runs (pid $(cat "$PIDFILE")) at $(base_url)"
    exports
  else
    echo "the tinker server is not running"
    return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
