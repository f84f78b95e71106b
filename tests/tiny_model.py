"""A tiny random Llama with SmolLM2-135M-Instruct's tokenizer and chat template, for tests of orchestration.

A test that checks what the pipeline does (which step samples with which weights version, a killed run
resumed, a deployment retried) does not need a model that can do arithmetic; at 0.4 M parameters in its
layers the engines load, sample, train and checkpoint it in a fraction of SmolLM2-135M's time, and
everything else (vLLM, the torch trainer, the weight sync, the tokenizer, the chat template) is real.
Tests of learning, of what weights change or of the default model's conversion keep SmolLM2-135M.
"""

from __future__ import annotations

import shutil
from pathlib import Path

BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json")
# What the backend contract (tests/policy_contract.py) needs to teach it the target answer: from its near-uniform
# start (about -11 a token) lr 1e-3 learns it in ~70 steps (71 on veRL, 78 on the torch trainer, 2026-11-30).
CONTRACT_LR = 1e-3
CONTRACT_STEPS = 120


def tiny_model(target: Path) -> Path:
    """The tiny model's folder, built once (atomically) into `target`: 2 layers of width 128, head size 64
    (vLLM's CPU attention takes it), tied embeddings over SmolLM2's 49,152 tokens."""
    if (target / "config.json").is_file():
        return target
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from checkpointing.models import building_once, resolve_model_path

    source = resolve_model_path(BASE_MODEL)
    base = LlamaConfig.from_pretrained(source)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=base.vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=base.max_position_embeddings,
        tie_word_embeddings=True, bos_token_id=base.bos_token_id, eos_token_id=base.eos_token_id,
        pad_token_id=base.pad_token_id,
    )
    with building_once(target) as tmp:
        AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(tmp)
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copy(source / name, tmp / name)
    return target
