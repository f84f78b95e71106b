"""Sampling speed of a rollout engine with and without its OpenAI endpoint (SmolLM2-135M, CPU).

With `enable_openai_api` the engine's batch `generate` runs through the engine loop that also serves
HTTP requests (backends/local/openai_server.py) instead of `LLM.generate`. This samples the same
batch (8 × 128 tokens, ignore_eos) both ways on one in-process engine, alternating, and then 8
concurrent chat completions through the real `openai` client. Prints and writes JSON.

    .venv/bin/python benchmarks/engine_loop.py [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # as in the engine actors
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "engine_loop.json"))
    args = parser.parse_args()

    import openai

    from backends.local.vllm_engine import EngineSettings, VLLMEngine
    from backends.rollout import SamplingSettings
    from checkpointing.models import resolve_model_path
    from deployments import load_recipe
    from workflows.render import renderer_for

    config = load_recipe("gsm8k-tools")
    model = resolve_model_path(config.model.model_path)
    settings = replace(EngineSettings.from_config(config, str(model)), kv_cache_memory_bytes=2**30)
    engine = VLLMEngine("bench-engine-loop-rollout-0", asdict(settings))
    server, engine.server = engine.server, None  # toggled below: None = LLM.generate, else the loop
    prompt = renderer_for(config.model.model_path).render([{"role": "user", "content": "Tell me a long story."}])
    sampling = SamplingSettings(n=1, max_tokens=args.tokens, temperature=1.0)

    def batch_speed() -> float:
        # min_tokens = max_tokens: every sequence samples the full length, so both ways do equal work
        started = time.perf_counter()
        out = engine.generate([prompt] * args.batch, replace(sampling, min_tokens=args.tokens))
        return sum(len(s.response_token_ids) for (s,) in out) / (time.perf_counter() - started)

    results: dict[str, list[float]] = {"direct": [], "loop": []}
    try:
        batch_speed()  # warm-up
        for _ in range(args.rounds):
            for way in ("direct", "loop"):
                engine.server = server if way == "loop" else None
                results[way].append(batch_speed())
        engine.server = server
        client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)

        def chat(_: int) -> int:
            reply = client.chat.completions.create(
                model="policy", messages=[{"role": "user", "content": "Tell me a long story."}],
                max_tokens=args.tokens, temperature=1.0, extra_body={"min_tokens": args.tokens},
            )
            return reply.usage.completion_tokens

        started = time.perf_counter()
        with ThreadPoolExecutor(args.batch) as pool:
            tokens = sum(pool.map(chat, range(args.batch)))
        http = tokens / (time.perf_counter() - started)
    finally:
        engine.server = server
        engine.shutdown()
    summary = {
        "batch": args.batch, "tokens": args.tokens, "rounds": args.rounds,
        "direct_tok_s": results["direct"], "loop_tok_s": results["loop"],
        "direct_median": statistics.median(results["direct"]), "loop_median": statistics.median(results["loop"]),
        "http_concurrent_tok_s": http, "cpu_count": os.cpu_count(),
    }
    print(json.dumps(summary, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
