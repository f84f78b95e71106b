#!/usr/bin/env bash
# The speed benchmark of docs/speed.md: our GRPO step (turns and overlap, sync every step or every second)
# and TRL's GRPOTrainer at the same shape, in one run. TRL goes into a folder of its own
# (.rft/bench-site), never into .venv: its declared ranges would move our pinned transformers, and veRL
# patches TRL's classes when it finds TRL importable. Extra arguments go to benchmarks/grpo_step.py.
# Takes ~20 minutes on 2 cores; run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
SITE=.rft/bench-site
[[ -d "$SITE/trl" ]] || .venv/bin/pip install -q --no-deps --target "$SITE" "trl==1.16.0"
RFT_TRL_SITE="$PWD/$SITE" exec .venv/bin/python benchmarks/grpo_step.py "$@"
