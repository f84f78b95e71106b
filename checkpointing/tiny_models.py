"""Tiny random-weight models of the architectures users bring, for tests and docs (no model hub here).

Each family differs where an RL system breaks: vLLM's packed layers (fused qkv, gate/up), tied or untied
embeddings, Qwen2's attention biases, Qwen3's q/k norms, Gemma 3's scaled embeddings and sliding-window
layers, a mixture of experts. A folder per family is built from a transformers config (2 layers of width
128, head size 64, which vLLM's CPU attention takes) with weights drawn at a fixed seed, and the embedded
model's tokenizer given the family's special tokens, chat template and end-of-turn tokens.

`model.model_path: tiny-random/<family>` builds one once into the model cache, like the embedded model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "tiny-random/"
SEED = 0
VERSION = 1  # of what build() writes: part of the cache folder's name, so a changed factory builds anew
_WIDTH = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 1, "head_dim": 64, "max_position_embeddings": 4096}

# Chat templates of each family, shortened to what the workflows use: roles, content, the generation prompt.
_QWEN2 = ("{%- if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You"
          " are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- for m in messages %}{{ '<|im_start|>' + m['role'] +"
          " '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{%- endif %}")
_QWEN3 = ("{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined"
          " and not enable_thinking %}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}")
_LLAMA3 = ("{{- bos_token }}{%- for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' +"
           " m['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}"
           "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
_GEMMA3 = ("{{- bos_token }}{%- for m in messages %}{%- set role = 'model' if m['role'] == 'assistant' else"
           " ('user' if m['role'] == 'system' else m['role']) %}{{ '<start_of_turn>' + role + '\\n' +"
           " m['content'] | trim + '<end_of_turn>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
           "{{ '<start_of_turn>model\\n' }}{%- endif %}")


@dataclass(frozen=True)
class Family:
    """One architecture: its transformers config class and fields, tokens and chat template."""

    config_class: str
    fields: dict[str, Any]
    template: str
    bos: str
    end_of_turn: str  # ends an assistant turn; the engines stop on it
    extra_special: tuple[str, ...] = ()
    also_stop: tuple[str, ...] = ()  # further end tokens of generation_config.json (Llama's, Gemma's <eos>)
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    notes: dict[str, str] = field(default_factory=dict)


FAMILIES: dict[str, Family] = {
    "qwen2": Family("Qwen2Config", {"tie_word_embeddings": True}, _QWEN2, "<|endoftext|>", "<|im_end|>",
                    also_stop=("<|endoftext|>",), notes={"differs": "attention biases on q/k/v; tied embeddings"}),
    "qwen3": Family("Qwen3Config", {"tie_word_embeddings": False}, _QWEN3, "<|endoftext|>", "<|im_end|>",
                    extra_special=("<think>", "</think>"), also_stop=("<|endoftext|>",),
                    notes={"differs": "q/k RMSNorm per head; untied lm_head"}),
    "llama3": Family("LlamaConfig", {"tie_word_embeddings": False}, _LLAMA3, "<|begin_of_text|>", "<|eot_id|>",
                     extra_special=("<|start_header_id|>", "<|end_header_id|>", "<|end_of_text|>"),
                     also_stop=("<|end_of_text|>",), notes={"differs": "untied lm_head; header tokens"}),
    "gemma3": Family("Gemma3TextConfig", {"tie_word_embeddings": True, "sliding_window": 16,
                                          "layer_types": ["sliding_attention", "full_attention"],
                                          "query_pre_attn_scalar": 64},
                     _GEMMA3, "<bos>", "<end_of_turn>", extra_special=("<start_of_turn>", "<eos>"),
                     also_stop=("<eos>",), notes={"differs": "scaled embeddings, (1+w) norms, sliding-window layer"}),
    "qwen3_moe": Family("Qwen3MoeConfig", {"tie_word_embeddings": False, "num_experts": 4, "num_experts_per_tok": 2,
                                           "moe_intermediate_size": 128, "decoder_sparse_step": 1},
                        _QWEN3, "<|endoftext|>", "<|im_end|>", extra_special=("<think>", "</think>"),
                        also_stop=("<|endoftext|>",), lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"),
                        notes={"differs": "4 experts, 2 per token, router weights; untied lm_head"}),
}


def family_of(model_id: str) -> str | None:
    """The family of a `tiny-random/<family>` id, else None."""
    name = model_id.removeprefix(PREFIX)
    return name if model_id.startswith(PREFIX) and name in FAMILIES else None


def cache_folder(root: Path, family: str) -> Path:
    """Where `tiny-random/<family>` is kept under the model cache `root`."""
    return root / PREFIX.rstrip("/") / f"{family}-v{VERSION}"


def build(family: str, target: Path, tokenizer_source: Path) -> Path:
    """The family's folder, built once (atomically) into `target` from the tokenizer in `tokenizer_source`."""
    if (target / "config.json").is_file():
        return target
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from checkpointing.atomic_folder import building_once

    spec = FAMILIES[family]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    specials = [t for t in (spec.bos, spec.end_of_turn, *spec.extra_special, *spec.also_stop)
                if t not in tokenizer.get_vocab()]
    tokenizer.add_special_tokens({"additional_special_tokens": specials}, replace_extra_special_tokens=False)
    tokenizer.bos_token, tokenizer.eos_token = spec.bos, spec.end_of_turn
    tokenizer.pad_token = spec.also_stop[0] if spec.also_stop else spec.end_of_turn
    tokenizer.chat_template = spec.template
    ids = tokenizer.convert_tokens_to_ids
    stops = [ids(spec.end_of_turn), *(ids(t) for t in spec.also_stop)]
    config = getattr(transformers, spec.config_class)(
        vocab_size=len(tokenizer), bos_token_id=ids(spec.bos), eos_token_id=stops, pad_token_id=tokenizer.pad_token_id,
        **_WIDTH, **spec.fields)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with building_once(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        generation = {"bos_token_id": ids(spec.bos), "eos_token_id": stops, "pad_token_id": tokenizer.pad_token_id}
        (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2))
    return target
