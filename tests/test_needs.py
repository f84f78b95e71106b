"""What a piece needs is declared where it is registered, what a trainer backend provides on its settings class, and
"can backend B run piece X" is needs ⊆ provides, its refusal generated from the need it lacks (issue 72)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

import algorithms
from algorithms import ADVANTAGE_FNS, KL_LOSS_FNS, NEEDS, POLICY_LOSS_FNS, register_policy_loss_fn
from algorithms.policy_loss.base import AggregatedArgs
from algorithms.registry import NEED_TEXT
from deployments import load_recipe
from schemas.algorithm_registry import SAMPLE_STRATEGY_NEEDS
from schemas.errors import describe_errors
from schemas.trainer import TRAINER_VARIANTS, TinkerTrainerConfig, VerlTrainerConfig

NAME = "ref_gap"  # a loss of this test only: -A · log p plus the gap to the reference, which it reads


class RefGapArgs(AggregatedArgs):
    """The test's loss over the reference's log-probs."""


@pytest.fixture
def ref_loss() -> Iterator[str]:
    def ref_gap(inputs: Any, args: dict[str, Any]) -> Any:
        loss = (-inputs.advantages * inputs.logprobs + (inputs.logprobs - inputs.ref_logprobs) ** 2).mean()
        return loss, {"pg_loss": loss.item()}

    register_policy_loss_fn(NAME, RefGapArgs, needs={"reference"})(ref_gap)
    try:
        yield NAME
    finally:
        POLICY_LOSS_FNS.unregister(NAME)


TINKER = {"model.tinker.enable": True, "synchronizer.sync_method": "checkpoint"}
ON = {"torch": {"trainer.trainer_type": "torch"}, "verl": {"trainer.trainer_type": "verl"}, "tinker": TINKER}


def test_a_loss_that_needs_the_reference_runs_where_it_is_provided_with_no_other_edit(ref_loss: str) -> None:
    for trainer, overrides in ON.items():
        config = load_recipe("smoke").with_overrides({"algorithm.policy_loss_fn": ref_loss, **overrides})
        assert config.trainer.trainer_type == trainer
        assert algorithms.needs_reference_model(config.algorithm), trainer  # every trainer then loads or scores it
        assert ref_loss in type(config.trainer).policy_losses()
    # veRL runs it whole as its engine's loss (the reference's log-probs go to it), not as a ppo_loss mode
    assert VerlTrainerConfig.runs_whole(ref_loss) and not VerlTrainerConfig.adapted(ref_loss)


def test_a_backend_without_the_need_refuses_it_with_a_generated_message(
        ref_loss: str, monkeypatch: pytest.MonkeyPatch) -> None:
    why = "this trainer scores no reference"
    monkeypatch.setattr(TinkerTrainerConfig, "CANNOT", {**TinkerTrainerConfig.CANNOT, "reference": why})
    assert ref_loss not in TinkerTrainerConfig.policy_losses()
    with pytest.raises(ValidationError) as exc:
        load_recipe("smoke").with_overrides({"algorithm.policy_loss_fn": ref_loss, **TINKER})
    lines = [line for line in describe_errors(exc.value) if line.startswith("algorithm.policy_loss_fn:")]
    assert lines == [f"algorithm.policy_loss_fn: '{ref_loss}' needs {NEED_TEXT['reference']}, which trainer_type "
                     f"'tinker' cannot train with: {why}; trainer_type 'torch' or 'verl' runs it"], \
        describe_errors(exc.value)


def test_every_need_is_described_and_every_refusal_says_why() -> None:
    assert set(NEED_TEXT) == set(NEEDS)
    for variant in TRAINER_VARIANTS.values():
        assert set(variant.CANNOT) <= set(NEEDS) and all(variant.CANNOT.values()), variant
    declared = [*POLICY_LOSS_FNS.needs.values(), *ADVANTAGE_FNS.needs.values(), *KL_LOSS_FNS.needs.values(),
                *SAMPLE_STRATEGY_NEEDS.values()]
    assert all(needs <= set(NEEDS) for needs in declared)


def test_the_predicates_read_the_declarations() -> None:
    """needs_critic, needs_teacher, ... are the registrations' needs, not lists of names."""
    from types import SimpleNamespace

    def alg(**fields: str) -> Any:
        return SimpleNamespace(**{"policy_loss_fn": "ppo", "advantage_fn": "grpo", "kl_loss_fn": "none",
                                  "kl_penalty_fn": "none", **fields})

    assert algorithms.needs_critic(alg(advantage_fn="ppo")) and not algorithms.needs_critic(alg())
    assert algorithms.needs_teacher(alg(advantage_fn="jsd")) and algorithms.needs_groups(alg())
    assert algorithms.needs_greedy_baseline(alg(advantage_fn="remax")) and algorithms.needs_steps(alg(advantage_fn="gigpo"))
    assert algorithms.is_preference_loss("dpo") and algorithms.needs_reference_model(alg(policy_loss_fn="dpo"))
    assert algorithms.uses_expert_rows("mix_chord") and not algorithms.needs_reference_model(alg())


def test_an_unknown_need_is_an_error_at_registration() -> None:
    with pytest.raises(ValueError, match="not Needs"):
        register_policy_loss_fn("never_registered", RefGapArgs, needs={"a_gpu"})  # type: ignore[arg-type]
    assert "never_registered" not in POLICY_LOSS_FNS
