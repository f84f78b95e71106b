"""Seconds per torch-trainer GRPO step on SmolLM2-135M-Instruct (CPU), its micro-batches split by prompt or not.

The batch is the `arith` recipe's: G groups of 8 samples of one prompt each (the recipe's system prompt and a
generated problem), each sample a worked answer of the `columns` style cut by 0-3 tokens, advantages ±1 (so
none is skipped), micro-batches of the recipe's 16. `by_prompt` gives each group micro-batches of its own, which
run its prompt once (trainer.share_prompt); `mixed` packs two groups into a micro-batch, which then runs every
row's prompt. The same trainer runs both, one warm-up step each, then `--steps` measured steps. The JSON is
written whole (a temporary file renamed over the old one), with the machine, date and commit.

    .venv/bin/python benchmarks/train_step.py [--groups 16] [--steps 3] [--model DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import backends.batch as batch_module  # noqa: E402
import backends.torch_trainer as trainer_module  # noqa: E402
from buffer.experience import Experience  # noqa: E402
from buffer.generators import generate  # noqa: E402
from checkpointing.models import resolve_model_path  # noqa: E402
from deployments import load_recipe  # noqa: E402
from deployments.recipes.arith import ARITH_SYSTEM_PROMPT  # noqa: E402

SAMPLES = 8
MODES = ("by_prompt", "mixed")


def grpo_batch(tokenizer, groups: int) -> list[Experience]:  # noqa: ANN001
    rng = random.Random(0)
    rows = generate("arith", {"solution_style": "columns"}, "train")[:groups]
    out = []
    for g, row in enumerate(rows):
        chat = [{"role": "system", "content": ARITH_SYSTEM_PROMPT}, {"role": "user", "content": row["question"]}]
        prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
        answer = [*tokenizer(row["solution"])["input_ids"], tokenizer.eos_token_id]
        for i in range(SAMPLES):
            response = answer[: len(answer) - rng.randint(0, 3)]
            advantage = 1.0 if i % 2 else -1.0
            out.append(Experience(eid=f"{g}/{i}", task_id=str(g), group_id=str(g), prompt_token_ids=prompt,
                                  response_token_ids=response, logprobs=[-0.5] * len(response), reward=advantage,
                                  advantage=advantage))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", default=None, help="a model folder; default: the recipe's model")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/measured/train_step.json"))
    args = parser.parse_args()

    config = load_recipe("arith")
    model_dir = Path(args.model or resolve_model_path(config.model.model_path))
    trainer = trainer_module.TorchTrainer(config, model_dir, total_steps=args.steps + 1)
    experiences = grpo_batch(trainer.tokenizer, args.groups)
    split = batch_module.micro_batches
    results = {}
    for mode in MODES:
        def micro_batches(rows, size, pairs=False, by_prompt=False, _by=mode == "by_prompt"):  # noqa: ANN001, ANN202
            return split(rows, size, pairs=pairs, by_prompt=_by)
        trainer_module.micro_batches = micro_batches
        seconds, tokens = [], 0.0
        for step in range(args.steps + 1):
            started = time.perf_counter()
            metrics = trainer.train_step(experiences)
            if step:  # the first is the warm-up
                seconds.append(time.perf_counter() - started)
            tokens = metrics["train_tokens"]
        results[mode] = {"median_s": round(statistics.median(seconds), 2), "min_s": round(min(seconds), 2),
                         "max_s": round(max(seconds), 2), "steps_s": [round(s, 2) for s in seconds],
                         "tokens_run": tokens}
        print(json.dumps({mode: results[mode]}), flush=True)
    trainer_module.micro_batches = split
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    record = {
        "what": __doc__.split("\n\n")[0],
        "shape": {"groups": args.groups, "samples": SAMPLES, "micro_batch_size": config.trainer.micro_batch_size},
        "model": str(model_dir), "date": datetime.date.today().isoformat(), "commit": commit,
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "results": results,
        "speedup_by_prompt": round(results["mixed"]["median_s"] / results["by_prompt"]["median_s"], 2),
    }
    out = Path(args.out)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
