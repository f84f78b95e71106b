#!/usr/bin/env bash
# The smoke recipe on this machine's GPUs: the torch trainer with checkpoint and NCCL sync, and veRL (scripts/gpu_smoke.py
# says what each check runs). After `scripts/setup.sh --gpu`; a JSON report in benchmarks/measured/.
#   scripts/gpu-smoke.sh                   run the checks (2 GPUs or more)
#   scripts/gpu-smoke.sh --dry-run --gpus 2  validate each check's config; run nothing (any machine)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/measured}/gpu_smoke_$(date -u +%Y-%m-%d).json"
[[ " $* " == *" --dry-run "* ]] && out="${OUT:-${TMPDIR:-/tmp}}/gpu_smoke_dry_run.json"
exec "${PYTHON:-.venv/bin/python}" scripts/gpu_smoke.py --out "$out" "$@"
