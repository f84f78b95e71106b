"""The pre-flight names the setting of every mistake in seconds, and only transient failures are retried.
Real files, real closed ports; nothing is started (the last test: `rft run`'s temporary Prefect server)."""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import pytest

from backends.errors import ConfigError, PartLost, TransientError, is_transient
from deployments import load_recipe
from preflight import PreflightError, check_checkpoint_root_dir, check_model_path, check_tasksets, preflight
from preflight import disk as preflight_disk

ROOT = Path(__file__).resolve().parent.parent


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


@pytest.fixture
def smoke(tmp_path: Path):
    return load_recipe("smoke").with_overrides({"checkpoint_root_dir": str(tmp_path / "checkpoints")})


def problems(config) -> dict[str, str]:
    with pytest.raises(PreflightError) as caught:
        preflight(config)
    return {p.field: str(p) for p in caught.value.problems}


def test_the_smoke_recipe_passes(smoke) -> None:
    lines = preflight(smoke)
    assert any(line.startswith("model.model_path: ") for line in lines)
    assert any("buffer.explorer_input.taskset: 7473 tasks" in line for line in lines)
    assert any(line.startswith("checkpoint_root_dir: ") and "GB needed" in line for line in lines)


def test_every_mistake_is_named_at_once(smoke, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    rows = (ROOT / "data/gsm8k/train.jsonl").read_text().splitlines()[:3]
    bad.write_text("\n".join([*rows, '{"question": "x", "answer": "1"', rows[0]]) + "\n")
    config = smoke.with_overrides({
        "model.model_path": str(tmp_path / "no-model"),
        "buffer.explorer_input.taskset.path": str(bad),
        "buffer.explorer_input.eval_tasksets.0.path": str(tmp_path / "missing.jsonl"),
    })
    found = problems(config)
    assert set(found) == {"model.model_path", "buffer.explorer_input.taskset.path", "buffer.explorer_input.eval_tasksets.0.path"}
    assert "no such folder" in found["model.model_path"]
    assert f"{bad}: malformed JSON on line 4" in found["buffer.explorer_input.taskset.path"]
    assert "missing.jsonl' not found" in found["buffer.explorer_input.eval_tasksets.0.path"]


def test_a_row_without_the_workflows_key_is_named(smoke, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"question": "1 + 1?", "answer": "2"}) + "\n" + json.dumps({"question": "2 + 2?"}) + "\n")
    with pytest.raises(ConfigError, match=r"buffer.explorer_input.taskset.path: .*key 'answer' missing in row 1"):
        check_tasksets(smoke.with_overrides({"buffer.explorer_input.taskset.path": str(rows)}))


def test_a_model_folder_must_load(smoke, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="model.model_path: .* does not load as a Hugging Face model"):
        check_model_path(smoke.with_overrides({"model.model_path": str(folder)}))


def test_a_model_folder_without_weights_is_named_with_the_fix(smoke, tmp_path: Path) -> None:
    """A trainer checkpoint's huggingface/ folder before `rft convert`: config and tokenizer, no weights."""
    import shutil

    from checkpointing.models import resolve_model_path

    folder = tmp_path / "global_step_50" / "actor" / "huggingface"
    shutil.copytree(resolve_model_path(smoke.model.model_path), folder,
                    ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    with pytest.raises(ConfigError, match=r"model.model_path: .* no weights .*rft convert --checkpoint-dir"):
        check_model_path(smoke.with_overrides({"model.model_path": str(folder)}))
    teacher = {"explorer.auxiliary_models": [{"model_path": str(folder)}]}
    with pytest.raises(ConfigError, match=r"explorer.auxiliary_models.0.model_path: .* no weights"):
        check_model_path(smoke.with_overrides(teacher))


def test_checkpoint_root_must_be_writable_and_roomy(smoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="checkpoint_root_dir: .* is a file"):
        check_checkpoint_root_dir(smoke.with_overrides({"checkpoint_root_dir": str(blocker / "checkpoints")}))
    # a checkpoint every step of 100k steps: ~160 TB, more than any disk here
    with pytest.raises(ConfigError, match=r"checkpoint_root_dir: .* GB free on .* but the run writes about"):
        check_checkpoint_root_dir(smoke.with_overrides({"buffer.total_steps": 100_000}))
    # ... unless only the newest few are kept: one more than kept on disk at once (the newest until it is
    # whole). A disk with 8 GB free stands in for this machine's, whose free space the suite's runs change.
    disk = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(preflight_disk.shutil, "disk_usage", lambda _: disk._replace(free=8 * 10**9))
    kept = {"buffer.total_steps": 100_000, "trainer.max_checkpoints_to_keep": 2}
    (line,) = check_checkpoint_root_dir(smoke.with_overrides(kept))
    assert "3 checkpoint(s) of" in line and "trainer.max_checkpoints_to_keep=2" in line, line
    with pytest.raises(ConfigError, match=r"8.0 GB free on .*\(5 checkpoint\(s\) of .*max_checkpoints_to_keep=4"):
        check_checkpoint_root_dir(smoke.with_overrides({**kept, "trainer.max_checkpoints_to_keep": 4}))


def test_a_tinker_run_writes_no_weights_under_the_checkpoint_root(smoke) -> None:
    """Tinker keeps its checkpoints' weights on its server; the root holds their tinker:// paths."""
    (line,) = check_checkpoint_root_dir(smoke.with_overrides({"model.tinker.enable": True, "buffer.total_steps": 100_000}))
    assert "tinker keeps the weights of its checkpoints on its server" in line and "needed" not in line, line


def test_mlflow_down_is_named_by_its_variable_within_seconds(smoke, monkeypatch: pytest.MonkeyPatch) -> None:
    from preflight.services import check_tracking_uri

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed_port()}")
    found = problems(smoke)
    assert list(found) == ["MLFLOW_TRACKING_URI"] and "the MLflow server does not answer" in found["MLFLOW_TRACKING_URI"]
    # the probe alone gives up in seconds (MLflow's own client would retry for minutes); the whole preflight
    # also reads the model and the tasksets, whose time depends on the machine's load
    started = time.monotonic()
    with pytest.raises(ConfigError):
        check_tracking_uri(smoke)
    assert time.monotonic() - started < 30


def test_a_ray_cluster_that_does_not_answer_is_named(smoke) -> None:
    address = f"127.0.0.1:{closed_port()}"
    found = problems(smoke.with_overrides({"cluster.ray_address": address}))
    assert list(found) == ["cluster.ray_address"] and f"no Ray cluster answers at {address}" in found["cluster.ray_address"]
    found = problems(smoke.with_overrides({"cluster.ray_address": "ray://nowhere"}))
    assert "is not 'local', 'auto', 'host:port' or 'ray://host:port'" in found["cluster.ray_address"]


def test_only_transient_failures_are_retried() -> None:
    import ray.exceptions

    def raised(error: BaseException, cause: BaseException | None = None) -> BaseException:
        try:
            raise error from cause
        except BaseException as err:  # noqa: BLE001
            return err

    assert is_transient(ConnectionResetError(104, "Connection reset by peer"))
    assert is_transient(TimeoutError())
    assert is_transient(PartLost("no actor named 'x'"))
    assert is_transient(ray.exceptions.ActorDiedError())
    assert is_transient(raised(RuntimeError("all tasks failed"), TransientError("engine died")))
    assert not is_transient(ValueError("bad value"))
    assert not is_transient(FileNotFoundError(2, "No such file"))
    assert not is_transient(raised(ConfigError("model.model_path", "no such folder"), ConnectionError()))
    died_in_init = ray.exceptions.RayActorError(error_msg="__init__ raised", actor_init_failed=True)
    assert not is_transient(died_in_init)  # an actor whose constructor raised died of its arguments


def test_config_error_message_starts_with_the_field() -> None:
    assert str(ConfigError("checkpoint_root_dir", "x")) == "checkpoint_root_dir: x"
    assert str(ConfigError("trainer.trainer_type", "trainer.trainer_type='verl': not built")) == (
        "trainer.trainer_type='verl': not built"
    )


@pytest.mark.slow  # starts `rft run`'s temporary Prefect server (and nothing else)
def test_rft_run_with_mistakes_ends_before_ray_or_any_engine_starts(tmp_path: Path) -> None:
    """The issue's run-time mistakes at once (missing model folder, a malformed taskset line, a missing
    eval set, MLflow down): `rft run` names each, once, with no traceback, and never starts Ray (its
    temp folder stays empty), so no engine or trainer actor can have been created."""
    import os
    import subprocess
    import sys
    import tempfile

    bad = tmp_path / "bad.jsonl"
    rows = (ROOT / "data/gsm8k/train.jsonl").read_text().splitlines()[:2]
    bad.write_text("\n".join([*rows, '{"question": "1 + 1?", "answer": "2"']) + "\n")
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # Ray's sessions would be made here
    mlflow = f"http://127.0.0.1:{closed_port()}"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {
        "PREFECT_HOME": str(tmp_path / "prefect"), "RAY_TMPDIR": str(ray_tmp), "MLFLOW_TRACKING_URI": mlflow,
    }
    settings = {
        "name": "mistakes", "checkpoint_root_dir": str(tmp_path / "checkpoints"), "cluster.ray_address": "local",
        "model.model_path": "/nowhere/model", "buffer.explorer_input.taskset.path": str(bad),
        "buffer.explorer_input.eval_tasksets.0.path": "/nowhere/eval.jsonl",
    }
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "run", "smoke", *[a for k, v in settings.items() for a in ("--set", f"{k}={v}")]],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    print(f"rft run with 4 mistakes ended after {time.monotonic() - started:.0f} s")
    output = proc.stdout + proc.stderr
    try:
        assert proc.returncode == 1, output[-5000:]
        final = proc.stderr.split("rft/mistakes failed: ")
        assert len(final) == 2, output[-5000:]  # the cause, once
        assert "model.model_path: '/nowhere/model': no such folder" in final[1]
        assert f"buffer.explorer_input.taskset.path: {bad}: malformed JSON on line 3" in final[1]
        assert "buffer.explorer_input.eval_tasksets.0.path: " in final[1] and "/nowhere/eval.jsonl" in final[1]
        assert f"MLFLOW_TRACKING_URI: {mlflow}: the MLflow server does not answer" in final[1]
        assert "Traceback" not in output, output[-5000:]  # neither ours nor Prefect's (telemetry) tracebacks
        assert list(ray_tmp.glob("**/session_*")) == []  # Ray never started a session: no engine, no trainer
        assert not (tmp_path / "checkpoints" / "rft" / "mistakes").exists()
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_generated_tasksets_pass_without_a_file_or_the_hub() -> None:
    """`path: generator:arith` (generators/) is neither a file nor a hub id: its rows are made."""
    lines = check_tasksets(load_recipe("arith"))
    assert any("tasks of generator:arith [train]" in line for line in lines)
    assert any(line.startswith("buffer.explorer_input.eval_tasksets.0: ") for line in lines)
