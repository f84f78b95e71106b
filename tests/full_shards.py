"""The `full` tests in two halves: CI runs them after the default tests, each half in its own pytest process and
only when, judged by how long the default tests took, it should still end within CI's 90 minutes
(`scripts/test.sh --ci`).

On a fast machine both halves run; on one much slower only one, and the parity of the last commit's hash picks which
(docs/testing.md).
By module, so a module's shared runs (hello on Tinker, the learning run) stay one run. The halves
balance the `full` tests' seconds of the whole run on 6ee961d (1,496 s in all, about half each; the file,
benchmarks/measured/suite_time_whole_2026-11-30_6ee961d.json, holds the total, not each half's).
tests/test_suite_time.py checks that every module with a `full` test is in exactly one half.
"""

from __future__ import annotations

from pathlib import Path

HALVES: tuple[frozenset[str], frozenset[str]] = (
    frozenset({"test_tinker", "test_learning", "test_deployment", "test_budget", "test_presets", "test_mix",
               "test_agents", "test_verl_trainer"}),
    frozenset({"test_dynamic_sampling_run", "test_ray_cluster", "test_self_healing", "test_distill", "test_async",
               "test_trinity_dapo", "test_judge", "test_kl_penalty_run", "test_critic_run"}),
)


def half_of(test_file: str | Path) -> int | None:
    """The half a test module's `full` tests belong to; None for a module in neither (which then runs in both)."""
    module = Path(test_file).stem
    return next((i for i, half in enumerate(HALVES) if module in half), None)
