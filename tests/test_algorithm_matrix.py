"""docs/algorithm-matrix.md is what the generator writes from the registries and the backends' rules (issue 72)."""

from __future__ import annotations

from deployments import algorithm_matrix


def test_the_committed_matrix_is_what_the_generator_writes() -> None:
    assert algorithm_matrix.main(["--check"]) == 0, "run: .venv/bin/python -m deployments.algorithm_matrix"


def test_a_refusal_names_the_field_and_a_backend_that_runs_it_says_yes() -> None:
    text = algorithm_matrix.render()
    m2po = next(line for line in text.splitlines() if line.startswith("| `m2po` |"))
    torch_cell, verl_cell = m2po.split(" | ")[1:3]
    assert torch_cell == "yes" and verl_cell.startswith(
        "algorithm.algorithm_type: 'm2po' needs a token mask chosen over the whole batch")
    assert "trainer_type 'verl' cannot train with" in verl_cell and "'torch' or 'tinker' runs it" in verl_cell
