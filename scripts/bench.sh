#!/usr/bin/env bash
# The speed benchmark of the README: our GRPO step (turns and overlap, sync every step or every second)
# and TRL's GRPOTrainer at the same shape, in one run. Installs TRL into .venv without its dependencies
# (its declared ranges would move our pinned transformers; it runs with ours). Extra arguments go to
# benchmarks/grpo_step.py. Takes ~20 minutes on 2 cores; run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/python -c "import trl" 2>/dev/null || .venv/bin/pip install -q --no-deps "trl==1.16.0"
exec .venv/bin/python benchmarks/grpo_step.py "$@"
