"""Every name Trinity-RFT's algorithm registries know (docs/trinity-parity.md) is known here: each
`algorithm_type` validates on the smoke recipe or is refused naming `algorithm.algorithm_type` and a
reason, and each function either has an implementation or a refusal with its reason. No name is
"unknown". (Which of them train a step: tests/test_presets.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from deployments import load_recipe
from schemas import describe_errors, support
from schemas.algorithm_registry import BUILT, FUNCTION_REGISTRIES

# Trinity-RFT's ALGORITHM_TYPE registry (trinity/algorithm/__init__.py), and `dapo`, our preset of its example.
TRINITY_ALGORITHM_TYPES = [
    "sft", "ppo", "grpo", "reinforceplusplus", "rloo", "opmd", "asymre", "dpo", "topr", "cispo", "gspo", "sapo",
    "mix", "mix_chord", "raft", "sppo", "rec", "multi_step_grpo", "on_policy_distill", "jsd", "dapo",
]
REFUSED_TYPES = {"ppo": "critic", "dpo": "preference", "on_policy_distill": "teacher", "jsd": "teacher",
                 "mix": "expert", "mix_chord": "expert"}
# The function registries: Trinity's names (and those issue 26 lists from later releases).
TRINITY_FUNCTIONS = {
    "advantage_fn": ["ppo", "grpo", "grpo_verl", "step_wise_grpo", "reinforceplusplus", "reinforce", "remax", "rloo",
                     "opmd", "opmd_verl", "asymre", "asymre_verl", "rec", "on_policy_distill", "jsd", "gigpo"],
    "policy_loss_fn": ["ppo", "opmd", "dpo", "sft", "mix", "gspo", "topr", "cispo", "sft_is", "sft_phi", "mix_chord",
                       "sppo", "rec", "sapo", "importance_sampling", "clipb", "clipv", "m2po"],
    "kl_loss_fn": ["none", "k1", "k2", "k3", "low_var_kl", "abs", "corrected_k3"],
    "entropy_loss_fn": ["default", "mix", "none"],
    "sample_strategy": ["default", "warmup", "staleness_control", "mix"],
}
DOC = Path(__file__).resolve().parents[1] / "docs" / "trinity-parity.md"


@pytest.mark.parametrize("algorithm_type", TRINITY_ALGORITHM_TYPES)
def test_trinity_algorithm_type_validates_or_is_refused_with_its_reason(algorithm_type: str) -> None:
    try:
        config = load_recipe("smoke").with_overrides({"algorithm": {"algorithm_type": algorithm_type}})
    except ValidationError as exc:
        lines = [line for line in describe_errors(exc) if line.startswith("algorithm.algorithm_type:")]
        assert algorithm_type in REFUSED_TYPES, lines or describe_errors(exc)
        assert lines and REFUSED_TYPES[algorithm_type] in lines[0] and "unknown" not in lines[0], lines
    else:
        assert algorithm_type not in REFUSED_TYPES
        assert config.algorithm.policy_loss_fn in BUILT["policy_loss_fn"]
        assert config.algorithm.advantage_fn in BUILT["advantage_fn"]


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, names in TRINITY_FUNCTIONS.items() for n in names])
def test_trinity_function_is_built_or_refused_with_a_reason(kind: str, name: str) -> None:
    assert name in FUNCTION_REGISTRIES[kind], f"{kind} {name!r} is unknown"
    entry = support.entry_for(f"algorithm.{kind}[{name}]")
    assert entry is not None, name
    refusal = entry[1].unconditional
    if refusal is not None and refusal.level == "refuse":
        assert len(refusal.reason) > 20 and "unknown" not in refusal.reason
    else:
        assert kind not in BUILT or name in BUILT[kind] or name == "none", f"{kind} {name!r} is neither built nor refused"


def test_the_parity_page_names_every_trinity_name() -> None:
    text = DOC.read_text()
    for name in TRINITY_ALGORITHM_TYPES + [n for names in TRINITY_FUNCTIONS.values() for n in names]:
        assert name in text, name


@pytest.mark.parametrize("mode", ["train", "both"])
def test_an_unknown_algorithm_type_is_a_named_error_not_a_traceback(tmp_path: Path, mode: str) -> None:
    from schemas.trinity.importer import import_trinity

    (tmp_path / "c.yaml").write_text(
        f"mode: {mode}\nproject: p\nname: n\nalgorithm: {{algorithm_type: not_an_algorithm}}\n"
        "model: {model_path: HuggingFaceTB/SmolLM2-135M-Instruct, max_prompt_tokens: 64, max_response_tokens: 64}\n"
        "buffer:\n  batch_size: 4\n  trainer_input:\n    experience_buffer: {name: x, path: x.jsonl}\n")
    with pytest.raises(ValidationError) as exc:
        import_trinity(tmp_path / "c.yaml")
    assert any(line.startswith("algorithm.algorithm_type: unknown algorithm 'not_an_algorithm'")
               for line in describe_errors(exc.value)), describe_errors(exc.value)
