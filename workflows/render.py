"""Chat messages ↔ token ids: the one place the chat template is applied (and plain-text prompts,
which skip it, are tokenized).

Engines take token ids; workflows render their chats here once, and the ids are what experiences
keep, so a multi-turn trajectory continues from its exact tokens.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from backends.rollout import Sample, TokenIds
from checkpointing.models import resolve_model_path

Messages = list[dict[str, Any]]  # an OpenAI-style chat: [{"role": ..., "content": ...}, ...]
# Runner threads share one tokenizer; a fast tokenizer's state is not safe to touch from two at once.
_LOCK = threading.Lock()
_PROBE = "\u2063probe\u2063"  # content of a probe turn: text no real turn contains


class ChatRenderer:
    """A tokenizer and its chat template (the model's own, or `model.custom_chat_template`);
    `enable_thinking` is handed to the template (Qwen3's switch; templates without it ignore it)."""

    def __init__(self, tokenizer: Any, chat_template: str | None = None, enable_thinking: bool = False) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.enable_thinking = enable_thinking

    def render(self, messages: Messages, *, add_generation_prompt: bool = True, tools: list[dict] | None = None) -> TokenIds:
        """Prompt token ids of a chat, ending with the assistant's turn header when asked."""
        # The template writes the special tokens (BOS, <|im_start|>...) as text.
        return self.encode(self.text(messages, add_generation_prompt=add_generation_prompt, tools=tools))

    def text(self, messages: Messages, *, add_generation_prompt: bool = True, tools: list[dict] | None = None) -> str:
        """The chat as the template writes it."""
        with _LOCK:
            return self.tokenizer.apply_chat_template(
                messages,
                chat_template=self.chat_template,
                add_generation_prompt=add_generation_prompt,
                tools=tools,
                tokenize=False,
                enable_thinking=self.enable_thinking,
            )

    def continuation(self, messages: Messages, after: TokenIds, *, tools: list[dict] | None = None) -> TokenIds:
        """Token ids that follow a sampled assistant turn (`after`, its ids) to add `messages` (what an
        environment or a tool says) and open the next assistant turn.

        Token-exact continuation: the next prompt is the previous prompt + `after` + these ids; nothing
        already sampled is rendered again. The template decides the text: it is rendered around a probe
        assistant turn, and what it writes after the probe's content is what closes the turn. When the
        sampled turn ended with (the start of) that closing text, e.g. SmolLM2's <|im_end|>, only the
        rest is added; a turn cut off by max_tokens is closed here.
        """
        probe = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                 {"role": "assistant", "content": _PROBE}]
        base = self.text(probe, add_generation_prompt=False, tools=tools)
        full = self.text([*probe, *messages], add_generation_prompt=True, tools=tools)
        if not full.startswith(base) or _PROBE not in base:
            raise ValueError("the chat template renders earlier turns differently once more messages follow: "
                             "token-exact continuation needs a template that only appends")
        closing = base[base.rindex(_PROBE) + len(_PROBE):]  # e.g. "<|im_end|>\n"
        ended = self.decode_raw(after[-1:]) if after else ""
        if ended and closing.startswith(ended):
            closing = closing[len(ended):]
        return self.encode(closing + full[len(base):])

    def decode_raw(self, ids: TokenIds) -> str:
        """The text of `ids` with special tokens written out (as the template writes them)."""
        with _LOCK:
            return self.tokenizer.decode(ids, skip_special_tokens=False)

    def encode_plain(self, text: str) -> TokenIds:
        """Token ids of a plain-text prompt (a base model's, no chat template), with the special tokens the
        tokenizer adds itself (a BOS where it has one), as vLLM and Trinity tokenize a text prompt."""
        with _LOCK:
            return self.tokenizer.encode(text)

    def encode(self, text: str) -> TokenIds:
        with _LOCK:
            return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: TokenIds) -> str:
        with _LOCK:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

    def with_text(self, samples: list[Sample]) -> list[Sample]:
        """The samples, each with its response decoded where the engine returned ids only."""
        for sample in samples:
            if not sample.text and sample.response_token_ids:
                sample.text = self.decode(sample.response_token_ids)
        return samples


@functools.lru_cache(maxsize=8)
def _tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


def renderer_for(model_path: str, chat_template: str | None = None, enable_thinking: bool = False) -> ChatRenderer:
    """The renderer of `model.model_path` (a local folder, the offline default, or a hub id)."""
    return ChatRenderer(_tokenizer(str(resolve_model_path(model_path))), chat_template, enable_thinking)
