"""The CPU engine's KV block size and the prefix cache, on the `arith` recipe's own prompts.

vLLM's CPU backend takes 128-token KV blocks unless told otherwise, and its prefix cache reuses whole
blocks only, so a prompt of ~60 tokens (arith's system prompt and question) is never reused: each of a
task's `n` samples prefills it again. The engine asks for CPU_PREFIX_BLOCK-token blocks instead
(backends/local/vllm_engine.py). This starts the product's engine on the recipe's settings with vLLM's
default and with ours, alternating, each in a process of its own, and times what a run does with it:
the recipe's greedy evaluation of its 300 held-out problems, and DAPO rounds of 16 train tasks × 8
samples at temperature 1 (the untrained model's answers, cut at the recipe's max_response_tokens).
Writes one JSON whole.

    .venv/bin/python benchmarks/prefix_blocks.py [--repeats 2] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # as in the engine actors
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
ROOT = Path(__file__).resolve().parent.parent
WAYS = ("vllm_default", "ours")


def measure(way: str, rounds: int) -> dict:
    """One engine's times; `vllm_default` drops the engine's block-size argument."""
    from backends.local.vllm_engine import EngineSettings, VLLMEngine
    from backends.rollout import SamplingSettings
    from buffer.taskset import load_taskset
    from checkpointing.models import resolve_model_path
    from deployments import load_recipe
    from workflows.math_workflow import MathWorkflow
    from workflows.render import renderer_for

    config = load_recipe("arith")
    if way == "vllm_default":
        VLLMEngine._cpu_cache_kwargs = lambda self: {}  # type: ignore[method-assign]
    settings = EngineSettings.from_config(config, str(resolve_model_path(config.model.model_path)))
    engine = VLLMEngine(f"bench-prefix-{way}-rollout-0", asdict(settings))
    renderer = renderer_for(config.model.model_path)
    inputs = config.buffer.explorer_input

    def prompts(tasks: list) -> list[list[int]]:
        """The recipe's own prompts, rendered as its workflow renders them."""
        return [renderer.render(MathWorkflow(t, engine, renderer, repeat_times=1, explore_step=0, model_version=0)
                                .messages()) for t in tasks]

    def timed(batch: list[list[int]], sampling: SamplingSettings) -> tuple[float, int]:
        started = time.perf_counter()
        out = engine.generate(batch, sampling)
        return time.perf_counter() - started, sum(len(s.response_token_ids) for group in out for s in group)

    max_tokens = config.model.max_response_tokens
    try:
        held_out = prompts(load_taskset(inputs.eval_tasksets[0])[:300])
        eval_s, eval_tokens = timed(held_out, SamplingSettings(n=1, temperature=0.0, max_tokens=max_tokens))
        train = prompts(load_taskset(inputs.taskset)[:16 * rounds])
        round_s, round_tokens = [], []
        for r in range(rounds):
            seconds, tokens = timed(train[16 * r:16 * (r + 1)],
                                    SamplingSettings(n=8, temperature=1.0, max_tokens=max_tokens))
            round_s.append(round(seconds, 2))
            round_tokens.append(tokens)
        block = engine.info()["block_size"]
    finally:
        engine.shutdown()
    return {"block_size": block, "eval_300_s": round(eval_s, 2), "eval_tokens": eval_tokens,
            "round_s": round_s, "round_tokens": round_tokens, "prompt_tokens": len(held_out[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "prefix_blocks.json"))
    parser.add_argument("--one", choices=WAYS, help=argparse.SUPPRESS)  # a child process: one engine
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(measure(args.one, args.rounds)), flush=True)
        return

    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    for _ in range(args.repeats):
        for way in WAYS:  # alternating, each engine in a fresh process
            done = subprocess.run([sys.executable, __file__, "--one", way, "--rounds", str(args.rounds)],
                                  cwd=ROOT, capture_output=True, text=True, check=True)
            line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
            runs[way].append(json.loads(line.removeprefix("RESULT ")))
            print(way, runs[way][-1], flush=True)

    def medians(way: str) -> dict:
        return {"eval_300_s": statistics.median(r["eval_300_s"] for r in runs[way]),
                "round_s": statistics.median(s for r in runs[way] for s in r["round_s"])}

    summary = {
        "what": "arith recipe's engine: 300 greedy held-out prompts, and rounds of 16 train tasks x 8 samples",
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "cpu_count": os.cpu_count(), "repeats": args.repeats, "runs": runs,
        "median": {way: medians(way) for way in WAYS},
    }
    base, ours = summary["median"]["vllm_default"], summary["median"]["ours"]
    summary["ours_over_default"] = {key: round(ours[key] / base[key], 3) for key in base}
    print(json.dumps(summary["median"], indent=2), summary["ours_over_default"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
