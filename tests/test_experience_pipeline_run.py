"""The experience pipeline in a whole run (the `hello` recipe on the tiny model, torch trainer, vLLM CPU): a step
whose every experience a filter leaves out trains nothing and the run goes on; what was left out is recorded as
dropped by its explore step, never trained, never lost. The taskset is the dynamic-sampling layout's
(tests/dynamic_sampling_layout.py): without dynamic sampling, step 3 reads its rows 4 and 5, both flat (reward 0)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from buffer.experience_store import ExperienceStore
from deployments import load_recipe
from tests.dynamic_sampling_layout import overrides
from tracking import tracking_uri

pytestmark = pytest.mark.slow
THRESHOLD = 1e-6  # reward_filter keeps reward >= threshold: a flat row's samples (0) are left out


def test_a_step_the_filters_empty_trains_nothing_and_the_run_goes_on(tmp_path: Path, tiny_model_path: str) -> None:
    from flows.rft import rft

    config = load_recipe("hello").with_overrides(overrides(tmp_path, "pipeline-empty") | {
        "model.model_path": tiny_model_path, "algorithm.filter_groups": {"enable": False},
        "data_processor.experience_pipeline.operators": [{"name": "reward_filter", "args": {"threshold": THRESHOLD}}],
    })
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 3

    store = ExperienceStore.for_experiment(config.experiment_dir)
    try:
        everything = store.experiences()
        trained, dropped = store.trained_eids(), store.dropped_eids()
    finally:
        store.close()
    assert len(everything) == 3 * 2 * 4  # every sample of the 3 steps × 2 tasks × 4 is recorded
    for e in everything:  # trained once by its own step, or dropped by it: never both, never neither
        assert (e.eid in trained) != (e.eid in dropped), e.eid
        if e.eid in dropped:
            assert dropped[e.eid] == e.explore_step and e.reward < THRESHOLD
        else:
            assert trained[e.eid] == e.explore_step and e.reward >= THRESHOLD
    assert {e.eid for e in everything if e.explore_step == 3} <= set(dropped)  # rows 4 and 5: flat
    assert any(e.explore_step == 1 for e in everything if e.eid in trained)  # row 1 is informative

    client = MlflowClient(tracking_uri=tracking_uri(config))
    empty = {m.step: m.value for m in client.get_metric_history(outcome["mlflow_run_id"], "train/empty_step")}
    assert empty == {3: 1.0}
