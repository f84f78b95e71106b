#!/usr/bin/env bash
# The torch trainer's core on this machine's GPU, step for step against CPU (scripts/device_check.py says what each
# check compares). For a GPU machine with PyTorch's CUDA stack, safetensors, transformers and peft, and no vLLM,
# Ray, Prefect or network. The JSON goes to $OUT when set (the device tool), else benchmarks/measured/.
#   scripts/device-check.sh --model DIR            a small Hugging Face folder (tests/tiny_model.py builds one)
#   scripts/device-check.sh --model DIR --dry-run  CPU against CPU: the checks' code on a machine without a GPU
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3 )}"
out="${OUT:-benchmarks/measured}/device_check_$(date -u +%Y-%m-%d).json"
[[ " $* " == *" --dry-run "* ]] && out="${OUT:-${TMPDIR:-/tmp}}/device_check_dry_run.json"
exec "$PY" scripts/device_check.py --out "$out" "$@"
