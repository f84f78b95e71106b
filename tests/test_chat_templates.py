"""Chat templates and end-of-turn tokens of each model family (issue 71), without engines.

The engines stopping at a family's end-of-turn token, and answering in its template, run in
tests/test_model_matrix.py; here: the pre-flight refuses a template that cannot open the assistant's turn, and a
multi-turn workflow closes and reopens turns in each family's own tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.errors import ConfigError
from checkpointing import tiny_models
from checkpointing.models import resolve_model_path
from deployments import load_recipe
from preflight.model import check_chat_template
from workflows.render import renderer_for

FAMILIES = list(tiny_models.FAMILIES)
OPENINGS = {"qwen2": "<|im_start|>assistant\n", "qwen3": "<|im_start|>assistant\n<think>\n\n</think>\n\n",
            "llama3": "<|start_header_id|>assistant<|end_header_id|>\n\n", "gemma3": "<start_of_turn>model\n",
            "qwen3_moe": "<|im_start|>assistant\n<think>\n\n</think>\n\n"}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_template_opens_the_assistant_turn_and_its_end_of_turn_stops_the_engines(family: str) -> None:
    folder = resolve_model_path(f"{tiny_models.PREFIX}{family}")
    config = load_recipe("smoke").with_overrides({"model.model_path": str(folder)})
    [line] = check_chat_template(config)
    assert repr(OPENINGS[family]) in line
    spec = tiny_models.FAMILIES[family]
    renderer = renderer_for(str(folder))
    stops = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert renderer.tokenizer.convert_tokens_to_ids(spec.end_of_turn) in stops  # what vLLM stops on


@pytest.mark.parametrize("family", FAMILIES)
def test_a_multi_turn_continuation_closes_the_turn_with_the_family_tokens(family: str) -> None:
    """A sampled turn that ended with the family's end-of-turn token is not closed twice; the environment's message
    follows in the family's own turn markers and the next assistant turn opens."""
    renderer = renderer_for(str(resolve_model_path(f"{tiny_models.PREFIX}{family}")))
    end = tiny_models.FAMILIES[family].end_of_turn
    answer = renderer.encode("I move left." + end)
    after = renderer.decode_raw(renderer.continuation([{"role": "user", "content": "You see a wall."}], answer))
    assert not after.startswith(end) and "You see a wall." in after
    assert after.endswith(OPENINGS[family])


def test_a_template_without_a_generation_prompt_is_refused_by_name() -> None:
    no_opening = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    config = load_recipe("smoke").with_overrides({"model.custom_chat_template": no_opening})
    with pytest.raises(ConfigError, match="add_generation_prompt") as err:
        check_chat_template(config)
    assert err.value.field == "model.custom_chat_template"


def test_a_model_without_a_chat_template_is_refused_unless_every_taskset_prompts_plain_text(tmp_path: Path) -> None:
    import shutil

    source = resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")
    base = tmp_path / "base-model"
    base.mkdir()
    for item in source.iterdir():
        if item.name != "chat_template.jinja":
            (base / item.name).symlink_to(item)
    config_file = json.loads((source / "tokenizer_config.json").read_text())
    config_file.pop("chat_template", None)
    (base / "tokenizer_config.json").unlink()
    (base / "tokenizer_config.json").write_text(json.dumps(config_file))
    config = load_recipe("smoke").with_overrides({"model.model_path": str(base)})
    with pytest.raises(ConfigError, match="no chat template") as err:
        check_chat_template(config)
    assert err.value.field == "model.model_path"
    shutil.rmtree(base)
