#!/usr/bin/env bash
# The speed benchmark of docs/speed.md: our GRPO step (in turns and overlapped) and TRL's GRPOTrainer
# (transformers' generate, and vLLM colocated) at each shape of the cost-growth grid, in one run; then the
# JSON, the plot beside it, and the section of docs/speed.md rendered from them (benchmarks/report.py).
# TRL goes into a folder of its own (.rft/bench-site), never into .venv: its declared ranges would move our
# pinned transformers, and veRL patches TRL's classes when it finds TRL importable.
# Extra arguments go to benchmarks/grpo_step.py and win over the defaults here (e.g. --shapes 1x128 --steps 8).
# The whole grid takes hours on 2 cores, the 16-prompt shapes most of them; run it on an otherwise idle machine.
# RFT_BENCH_OUT picks the JSON (not --out: the report reads that path); the plot is written beside it (.png).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
SITE=.rft/bench-site
OUT="${RFT_BENCH_OUT:-benchmarks/measured/grpo_step.json}"
[[ -d "$SITE/trl" ]] || .venv/bin/pip install -q --no-deps --target "$SITE" "trl==1.16.0"
RFT_TRL_SITE="$PWD/$SITE" .venv/bin/python benchmarks/grpo_step.py \
  --shapes 1x128 4x128 16x128 1x512 4x512 16x512 --variants offset0-interval1 offset1-interval1 \
  --out "$OUT" "$@"
.venv/bin/python benchmarks/report.py --json "$OUT" --doc docs/speed.md
