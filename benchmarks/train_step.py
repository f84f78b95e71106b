"""Seconds per torch-trainer GRPO step on SmolLM2-135M-Instruct (CPU), its micro-batches split by prompt or not.

The batch is the `arith` recipe's: G groups of 8 samples of one prompt each (the recipe's system prompt and a
generated problem), each sample a worked answer of the `columns` style cut by 0-3 tokens, advantages ±1 (so
none is skipped), micro-batches of the recipe's 16. `by_prompt` gives each group micro-batches of its own, which
run its prompt once (trainer.share_prompt); `mixed` packs two groups into a micro-batch, which then runs every
row's prompt. The same trainer runs both, one warm-up step each, then `--steps` measured steps. The JSON is
written whole (a temporary file renamed over the old one), with the machine, date and commit.

`--stage sft` times the recipe's warm-up step instead: 16 worked answers of the `columns` style, each under
its own question and the one system prompt, with the prompts' common opening run once per micro-batch
(`shared_opening`, trainer.share_prompt) or every row padded whole (`padded`); it writes sft_step.json.

    .venv/bin/python benchmarks/train_step.py [--stage grpo|sft] [--groups 16] [--steps 3] [--model DIR] [--out FILE]
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
from checkpointing.models import resolve_model_path  # noqa: E402
from deployments import load_recipe  # noqa: E402
from deployments.recipes.arith import ARITH_SYSTEM_PROMPT  # noqa: E402
from generators import generate  # noqa: E402
from tasks.sft import dataset_key, supervised_examples  # noqa: E402

SAMPLES = 8
MODES = {"grpo": ("by_prompt", "mixed"), "sft": ("shared_opening", "padded")}


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


def timed(trainer, experiences: list[Experience], steps: int) -> dict:  # noqa: ANN001
    """One warm-up step, then `steps` measured ones: their median, min and max seconds."""
    seconds, tokens = [], 0.0
    for step in range(steps + 1):
        started = time.perf_counter()
        metrics = trainer.train_step(experiences)
        if step:  # the first is the warm-up
            seconds.append(time.perf_counter() - started)
        tokens = metrics["train_tokens"]
    return {"median_s": round(statistics.median(seconds), 2), "min_s": round(min(seconds), 2),
            "max_s": round(max(seconds), 2), "steps_s": [round(s, 2) for s in seconds], "tokens_run": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", choices=tuple(MODES), default="grpo")
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", default=None, help="a model folder; default: the recipe's model")
    parser.add_argument("--out", default=None, help="default: benchmarks/measured/{train,sft}_step.json")
    args = parser.parse_args()

    recipe = load_recipe("arith")
    model_dir = Path(args.model or resolve_model_path(recipe.model.model_path))
    if args.stage == "grpo":
        config = recipe
        trainer = trainer_module.TorchTrainer(config, model_dir, total_steps=args.steps + 1)
        experiences = grpo_batch(trainer.tokenizer, args.groups)
    else:
        config = recipe.resolve_stages()[0].with_overrides({
            "buffer.trainer_input.experience_buffer.generator_args": {"solution_style": "columns"}})
        trainer = trainer_module.TorchTrainer(config, model_dir, total_steps=args.steps + 1)
        rows = supervised_examples(*dataset_key(config, str(model_dir)))
        experiences = list(rows[: config.buffer.train_batch_size])
    split = batch_module.micro_batches
    results = {}
    for mode in MODES[args.stage]:
        if args.stage == "grpo":
            def micro_batches(rows, size, pairs=False, by_prompt=False, _by=mode == "by_prompt"):  # noqa: ANN001, ANN202
                return split(rows, size, pairs=pairs, by_prompt=_by)
            trainer_module.micro_batches = micro_batches
        else:
            trainer.share_prompt = mode == "shared_opening"
        results[mode] = timed(trainer, experiences, args.steps)
        print(json.dumps({mode: results[mode]}), flush=True)
    trainer_module.micro_batches = split
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    fast, slow = MODES[args.stage]
    shape = ({"groups": args.groups, "samples": SAMPLES} if args.stage == "grpo"
             else {"rows": len(experiences), "solution_style": "columns"})
    record = {
        "what": __doc__.split("\n\n")[0] if args.stage == "grpo" else
        "Seconds per torch-trainer SFT step (the arith warm-up's) on SmolLM2-135M-Instruct (CPU), its rows' common "
        "prompt opening run once per micro-batch or not.",
        "shape": {**shape, "micro_batch_size": config.trainer.micro_batch_size},
        "model": str(model_dir), "date": datetime.date.today().isoformat(), "commit": commit,
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "results": results,
        f"speedup_{fast}": round(results[slow]["median_s"] / results[fast]["median_s"], 2),
    }
    out = Path(args.out or ROOT / f"benchmarks/measured/{'train' if args.stage == 'grpo' else 'sft'}_step.json")
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
