"""prefect.yaml is generated from the recipes: one source of truth, checked by a test.

    .venv/bin/python -m deployments.prefect_yaml            # rewrite prefect.yaml
    .venv/bin/python -m deployments.prefect_yaml --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deployments import load_recipe

PREFECT_YAML = Path(__file__).resolve().parent.parent / "prefect.yaml"
ENTRYPOINT = "flows/rft.py:rft"
COMPARE_ENTRYPOINT = "flows/compare.py:compare"
CPU_POOL = "rft-cpu"
GPU_POOL = "rft-gpu"
NIGHTLY_CRON = "0 2 * * *"  # 02:00 UTC


@dataclass(frozen=True)
class Deployment:
    recipe: str
    work_pool: str
    description: str
    nightly: bool = False
    name: str = ""  # the deployment's name; "": the recipe's
    settings: dict[str, Any] = field(default_factory=dict)  # applied to the recipe's config
    name_per_flow_run: bool = True  # False: every run of it is one experiment (explore/train pairs)
    variants: tuple[dict[str, Any], ...] = ()  # set: the `compare` flow over these variants, not `rft`


# The nightly gate: strict accuracy on the 400 held-out problems must rise by a point (about one standard
# error at the recipe's 3 %: docs/recipes/gsm8k.md) for the night's model to take `champion`.
NIGHTLY_GATE = {"metric": "gsm8k-eval/strict", "margin": 0.01, "alias": "champion"}

# One experiment that an explore run and a train run share (started separately, they finish together).
SPLIT = {"name": "smoke-split", "buffer.total_steps": 3}

DEPLOYMENTS = (
    Deployment("gsm8k", CPU_POOL, "GRPO on GSM8K with SmolLM2-135M-Instruct on CPU (the embedded default); the night's "
               "model takes the registry alias 'champion' only if it beats the holder (docs/nightly.md).",
               nightly=True, settings={"monitor.gate": NIGHTLY_GATE}),
    Deployment("arith", CPU_POOL, "GRPO on generated arithmetic with SmolLM2-135M-Instruct on CPU: visible learning in minutes."),
    Deployment("arith-dpo", CPU_POOL, "DPO on generated arithmetic (worked answers against the warm-up model's own wrong ones) "
               "after a short SFT warm-up, SmolLM2-135M-Instruct on CPU."),
    Deployment("smoke", CPU_POOL, "Two tiny GRPO steps through the whole stack, for CI."),
    Deployment("smoke", CPU_POOL, "The explorer of experiment smoke-split; run it with rft/smoke-train.",
               name="smoke-explore", settings={**SPLIT, "mode": "explore"}, name_per_flow_run=False),
    Deployment("smoke", CPU_POOL, "The trainer of experiment smoke-split; run it with rft/smoke-explore.",
               name="smoke-train", settings={**SPLIT, "mode": "train"}, name_per_flow_run=False),
    Deployment("hello", CPU_POOL, "The model learns one identity string (GRPO, LoRA), torch trainer and vLLM on CPU."),
    Deployment("hello", CPU_POOL, "The Tinker smoke test: hello trained and sampled on the Tinker server of the "
               "worker's TINKER_BASE_URL (scripts/tinker-server.sh) or the hosted service.",
               name="hello-tinker", settings={"model.tinker.enable": True}),
    Deployment("gsm8k-qwen", GPU_POOL, "Trinity-RFT's quick-start: Qwen2.5-1.5B-Instruct, GRPO, 2 GPUs."),
    # No GPU here: Tinker trains and samples on its server; the worker only needs the key and the address.
    Deployment("gsm8k-tinker", CPU_POOL, "Llama-3.2-3B GRPO trained through the Tinker service."),
    Deployment("gsm8k-verl-lora", GPU_POOL, "Llama-3.2-3B GRPO with LoRA rank 32 on the veRL trainer."),
    Deployment("q20", CPU_POOL, "Twenty questions: multi-turn GRPO against a rule-based answerer, on CPU."),
    Deployment("frozenlake", CPU_POOL, "FrozenLake (gymnasium) on generated maps: multi-turn GRPO, one move a turn, on CPU."),
    Deployment("frozenlake-learn", CPU_POOL, "FrozenLake on easier maps: an SFT warm-up on shortest walks, then GRPO, "
               "evaluated on 200 held-out maps, on CPU."),
    Deployment("sudoku", CPU_POOL, "4x4 Sudoku on generated puzzles: multi-turn GRPO, a few cells a turn, on CPU."),
    Deployment("sciworld", CPU_POOL, "ScienceWorld (Java simulator) tasks and variations: multi-turn GRPO, one "
               "command a turn, on CPU."),
    Deployment("textworld", CPU_POOL, "TextWorld games generated locally: multi-turn GRPO, one command a turn, on CPU."),
    Deployment("rg-countdown", CPU_POOL, "reasoning-gym's countdown, generated, scored by its own verifier: GRPO on CPU."),
    Deployment("gsm8k-tools", CPU_POOL, "A GSM8K agent with a calculator tool, trained through the OpenAI endpoint."),
    Deployment("smoke", CPU_POOL, "A/B: smoke on the torch trainer and on veRL, same seeds and data; one MLflow "
               "comparison and a verdict artifact (docs/nightly.md).", name="smoke-trainers",
               variants=({"trainer.trainer_type": "torch"}, {"trainer.trainer_type": "verl"})),
    Deployment("serve", CPU_POOL, "The latest weights of an experiment on an OpenAI-compatible endpoint, until cancelled.",
               name_per_flow_run=False),
)


def deployment_entry(item: Deployment) -> dict[str, Any]:
    config = load_recipe(item.recipe).with_overrides(item.settings)
    entry: dict[str, Any] = {
        "name": item.name or item.recipe,
        "description": item.description,
        "entrypoint": COMPARE_ENTRYPOINT if item.variants else ENTRYPOINT,
        "tags": ["rft", "cpu" if item.work_pool == CPU_POOL else "gpu"],
        # Runs of one deployment share an experiment directory: never two at once.
        "concurrency_limit": 1,
        # Each flow run is its own experiment (nightly runs compare in MLflow); a retry resumes it.
        "parameters": {"config": config.user_data(), "overrides": {}, "name_per_flow_run": item.name_per_flow_run},
        "work_pool": {"name": item.work_pool},
    }
    if item.variants:
        entry["parameters"] = {"config": config.user_data(), "variants": list(item.variants)}
    if item.nightly:
        entry["schedules"] = [{"cron": NIGHTLY_CRON, "timezone": "UTC", "active": True}]
    return entry


def render() -> str:
    document = {
        "name": "rft",
        "prefect-version": "3.6.29",
        "deployments": [deployment_entry(item) for item in DEPLOYMENTS],
    }
    header = "# Generated by `python -m deployments.prefect_yaml` from deployments/recipes/. Do not edit.\n"
    return header + yaml.safe_dump(document, sort_keys=False, width=110)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not PREFECT_YAML.exists() or PREFECT_YAML.read_text() != text:
            print(f"{PREFECT_YAML} is out of date: run python -m deployments.prefect_yaml", file=sys.stderr)
            return 1
        return 0
    PREFECT_YAML.write_text(text)
    print(f"wrote {PREFECT_YAML}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
