"""TRL's GRPOTrainer at the benchmark's shape, for comparison in the same run (same machine, model, data).

One GSM8K prompt × 8 generations of ≤128 tokens per step, SmolLM2-135M-Instruct in float32 on CPU, the
same system prompt and reward as our math_workflow, no KL term. Prints one JSON line:
{"seconds_per_step": median over the measured steps, "steps": [...]}.

TRL is an optional benchmark dependency, kept out of .venv: scripts/bench.sh installs trl==1.16.0
with --no-deps into .rft/bench-site (its declared ranges would move our pinned transformers; it runs
with ours).

    PYTHONPATH=.rft/bench-site .venv/bin/python benchmarks/trl_grpo.py [--steps 6]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="steps to run (the first is warm-up)")
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from buffer.taskset import load_taskset
    from checkpointing.models import resolve_model_path
    from deployments import load_recipe
    from workflows.math_workflow import DEFAULT_SYSTEM_PROMPT, gold_answer, score_math

    model_dir = resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")
    taskset = load_recipe("gsm8k").buffer.explorer_input.taskset
    rows = [t.raw for t in load_taskset(taskset)[: args.steps]]
    data = Dataset.from_list([
        {"prompt": [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": r["question"]}],
         "gold": gold_answer(r["answer"])}
        for r in rows
    ])

    def reward(prompts: list, completions: list, gold: list[str], **_: object) -> list[float]:
        return [sum(score_math(c[-1]["content"], g).values()) for c, g in zip(completions, gold, strict=True)]

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = [time.perf_counter()]

        def on_step_end(self, *_: object, **__: object) -> None:
            self.ends.append(time.perf_counter())

    times = StepTimes()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    # Stop where vLLM stops (the model's end-of-turn token, generation_config.eos_token_id): the GGUF's
    # tokenizer names <|im_start|> as its eos token.
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(model.generation_config.eos_token_id)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=reward,
        train_dataset=data,
        callbacks=[times],
        args=GRPOConfig(
            output_dir=tempfile.mkdtemp(prefix="trl-bench-"),
            per_device_train_batch_size=8,
            num_generations=8,
            max_completion_length=128,
            max_steps=args.steps,
            learning_rate=1e-5,
            beta=0.0,
            temperature=1.0,
            use_vllm=False,
            bf16=False,
            use_cpu=True,
            report_to="none",
            logging_steps=1,
            save_strategy="no",
            seed=0,
        ),
    )
    trainer.train()
    steps = [b - a for a, b in zip(times.ends, times.ends[1:])]
    measured = steps[1:] if len(steps) > 1 else steps
    print(json.dumps({"seconds_per_step": statistics.median(measured), "steps": steps, "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
