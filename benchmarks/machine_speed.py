"""This machine's sampling speed, the number stated beside a run's minutes (machines here differ up to 2×).

One rollout engine with the arith recipe's settings (SmolLM2-135M, float32, vLLM's CPU build) samples 8 × 128
tokens (min_tokens = max_tokens, so every round does equal work), a warm-up round and then `--rounds` measured
ones. Writes JSON whole: the median tokens/s, min and max, the CPU and the core count.

    .venv/bin/python benchmarks/machine_speed.py [--rounds 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import asdict
from datetime import date
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # as in the engine actors
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(Path(__file__).parent / "measured" / f"machine_speed_{date.today()}.json"))
    args = parser.parse_args()

    from backends.local.vllm_engine import EngineSettings, VLLMEngine
    from backends.rollout import SamplingSettings
    from checkpointing.models import resolve_model_path
    from deployments import load_recipe
    from workflows.render import renderer_for

    batch, tokens = 8, 128
    config = load_recipe("arith")
    model = resolve_model_path(config.model.model_path)
    engine = VLLMEngine("machine-speed-rollout-0", asdict(EngineSettings.from_config(config, str(model))))
    prompt = renderer_for(config.model.model_path).render([{"role": "user", "content": "Tell me a long story."}])
    sampling = SamplingSettings(n=1, max_tokens=tokens, min_tokens=tokens, temperature=1.0)

    def tokens_per_s() -> float:
        started = time.perf_counter()
        out = engine.generate([prompt] * batch, sampling)
        return sum(len(s.response_token_ids) for (s,) in out) / (time.perf_counter() - started)

    try:
        tokens_per_s()  # warm-up
        measured = [tokens_per_s() for _ in range(args.rounds)]
    finally:
        engine.shutdown()
    result = {
        "what": f"sampling tokens/s of one vLLM CPU engine, SmolLM2-135M float32, {batch} x {tokens} tokens",
        "median_tokens_per_s": round(statistics.median(measured), 1),
        "min_tokens_per_s": round(min(measured), 1),
        "max_tokens_per_s": round(max(measured), 1),
        "rounds": [round(x, 1) for x in measured],
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "date": str(date.today()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
