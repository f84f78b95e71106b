"""rft compare: the verdict (who won, by how much, beyond the eval's noise) and the MLflow comparison."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient

from flows.compare import noise_band, verdict_markdown
from tracking import compare
from tracking.spool import TrackingClient

ROWS = [
    {"variant": "trainer.trainer_type=torch", "run_id": "a", "gsm8k-eval/strict": 0.10, "gsm8k-eval/tasks": 400},
    {"variant": "trainer.trainer_type=verl", "run_id": "b", "gsm8k-eval/strict": 0.20, "gsm8k-eval/tasks": 400},
]


def test_the_verdict_names_the_winner_the_gain_and_the_noise_band() -> None:
    text = verdict_markdown("cmp", ROWS, "parent-id")
    band = noise_band(0.20, 0.10, 400)
    assert round(band, 4) == 0.0491  # 1.96 * sqrt((81/402 * 321/402 + 41/402 * 361/402) / 402)
    assert noise_band(0.0, 0.0, 4) > 0.4  # 0 of 4 against 0 of 4 tells little, and the band says so
    assert f"| gsm8k-eval/strict | trainer.trainer_type=verl | +0.1000 | trainer.trainer_type=torch | ±{band:.4f} | yes |" in text
    close = [ROWS[0], {**ROWS[1], "gsm8k-eval/strict": 0.12}]
    assert "| no |" in verdict_markdown("cmp", close, None)  # 2 points on 400 tasks: within the noise


def test_the_comparison_is_a_parent_run_with_a_child_per_variant(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    raw = MlflowClient(tracking_uri=uri)
    experiment = raw.create_experiment("rft", artifact_location=(tmp_path / "artifacts").as_uri())
    parent = compare.log(TrackingClient(uri, tmp_path / "spool.jsonl"), experiment, "cmp", ROWS,
                         {r["variant"]: [(1, 0.1), (2, 0.3)] for r in ROWS}, "training reward")
    children = raw.search_runs([experiment], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")
    assert sorted(c.info.run_name for c in children) == sorted(r["variant"] for r in ROWS)
    assert {c.data.metrics["gsm8k-eval/strict"] for c in children} == {0.10, 0.20}
    assert {c.data.tags[compare.VARIANT_RUN_TAG] for c in children} == {"a", "b"}
    assert {"comparison.json", "comparison_curve.png"} <= {a.path for a in raw.list_artifacts(parent)}
