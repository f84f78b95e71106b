"""Write data/arith-self-pairs/{train,test}.jsonl: arith preference pairs whose rejected side is a model's own
wrong answer, sampled (run from the repository root):

    .venv/bin/python scripts/arith_self_pairs.py --model checkpoints/rft/arith-dpo/sft_warmup/final/huggingface

The bundled files were sampled from the `arith-dpo` recipe's warm-up model (its 50 steps are deterministic on
CPU, so every run of the recipe trains the same model; docs/recipes/arith-dpo.md). Each row keeps the generator's
`question`, `answer`, `operation` and worked `solution` (the chosen side) and gains `rejected`: the first of the
model's samples (temperature 1, the recipe's prompt and response length) whose boxed answer is not right.
Problems the model answered right every time have no pair. `meta.json` says what was sampled from and counts.

    train  the generator's train rows after the warm-up's (the rows DPO reads), one sample each
    test   the 300 held-out problems, `--test-samples` samples each: the held-out preference pairs
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from backends.local.vllm_engine import EngineSettings, VLLMEngine, cpu_engine_env
from backends.rollout import SamplingSettings
from deployments.recipes.arith import ARITH_SFT
from deployments.recipes.arith_dpo import PAIR_FORMAT, WARMUP_ROWS
from deployments.recipes.arith_dpo import config as recipe
from generators import generate
from tasks.sft import prompt_messages
from workflows.math_workflow import score_math
from workflows.render import renderer_for

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "data" / "arith-self-pairs"


def sample_pairs(engine: VLLMEngine, model: str, rows: list[dict[str, Any]], n: int) -> tuple[list[dict], int]:
    """Rows with the model's own wrong answer as `rejected`, and how many samples were right."""
    renderer = renderer_for(model, None)
    prompts = [renderer.render(prompt_messages(row, PAIR_FORMAT)) for row in rows]
    # The engine's seed makes the draws repeatable (a per-request seed fails in vLLM's CPU sampler).
    settings = SamplingSettings(n=n, temperature=1.0, max_tokens=recipe.model.max_response_tokens)
    pairs, right = [], 0
    for row, samples in zip(rows, engine.generate(prompts, settings), strict=True):
        texts = [renderer.decode(s.response_token_ids) for s in samples]
        strict = [score_math(text, row["answer"], require_boxed=True)["strict"] for text in texts]
        right += int(sum(strict))
        if (wrong := next((text for text, ok in zip(texts, strict) if not ok), None)) is not None:
            pairs.append({**row, "rejected": wrong})
    return pairs, right


def weights_digest(model: Path) -> str:
    return hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="the arith-dpo warm-up's model folder (huggingface)")
    parser.add_argument("--train-rows", type=int, default=2000, help="train rows to sample, after the warm-up's")
    parser.add_argument("--test-samples", type=int, default=4, help="samples per held-out problem")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not (args.model / "model.safetensors").is_file():
        parser.error(f"--model {args.model}: no model.safetensors there (give the warm-up's final/huggingface folder)")
    generator_args = ARITH_SFT.generator_args or {}  # the warm-up's rows, and their held-out problems
    train = generate("arith", generator_args, "train")[WARMUP_ROWS:WARMUP_ROWS + args.train_rows]
    test = generate("arith", generator_args, "test")
    os.environ.update(cpu_engine_env(None))
    # The engine the recipe's warm-up samples with (lengths, dtype, cache), at this script's seed.
    # show_progress: vLLM's bar over the prompts, live, for the minutes of each of the two calls.
    settings = replace(EngineSettings.from_config(recipe.resolve_stages()[0], str(args.model)), seed=args.seed,
                       show_progress=True)
    engine = VLLMEngine("arith-self-pairs", asdict(settings))
    started = time.perf_counter()
    try:
        print(f"==> sampling {len(train)} train rows once each", flush=True)
        train_pairs, train_right = sample_pairs(engine, str(args.model), train, 1)
        print(f"==> sampling the {len(test)} held-out problems {args.test_samples} times each", flush=True)
        test_pairs, test_right = sample_pairs(engine, str(args.model), test, args.test_samples)
    finally:
        engine.shutdown()
    TARGET.mkdir(parents=True, exist_ok=True)
    for split, pairs in (("train", train_pairs), ("test", test_pairs)):
        (TARGET / f"{split}.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    meta = {
        "model": str(args.model), "model_sha256_16": weights_digest(args.model), "seed": args.seed,
        "temperature": 1.0, "max_tokens": recipe.model.max_response_tokens, "generator_args": generator_args,
        "train": {"rows": f"train[{WARMUP_ROWS}:{WARMUP_ROWS + len(train)}]", "samples_per_row": 1,
                  "right_samples": train_right, "pairs": len(train_pairs)},
        "test": {"rows": "test", "problems": len(test), "samples_per_row": args.test_samples,
                 "right_samples": test_right, "pairs": len(test_pairs)},
        "seconds": round(time.perf_counter() - started, 1),
    }
    (TARGET / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
