"""The CI smoke flow: deploy prefect.yaml to a real local Prefect server and run rft/smoke on a
process worker with `prefect deployment run rft/smoke --watch`, as a user would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from deployments import prefect_yaml

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
PREFECT = str(Path(sys.executable).parent / "prefect")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def prefect_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    logs = home / "logs"
    logs.mkdir()
    server = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=open(logs / "server.log", "w"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    workers: list[subprocess.Popen] = []
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail("Prefect server did not start: " + (logs / "server.log").read_text()[-2000:])
        for pool in (prefect_yaml.CPU_POOL, prefect_yaml.GPU_POOL):
            subprocess.run([PREFECT, "work-pool", "create", pool, "--type", "process"], env=env, check=True, capture_output=True)
        deploy = subprocess.run([PREFECT, "--no-prompt", "deploy", "--all"], env=env, cwd=ROOT, capture_output=True, text=True)
        assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
        # This machine has no GPU: a worker of the GPU pool here shows what a GPU deployment does on it.
        workers = [
            subprocess.Popen(
                [PREFECT, "worker", "start", "--pool", pool, "--type", "process"],
                env=env, cwd=ROOT, stdout=open(logs / f"worker-{pool}.log", "w"), stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            for pool in (prefect_yaml.CPU_POOL, prefect_yaml.GPU_POOL)
        ]
        yield env
    finally:
        for proc in [*workers, server]:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=60)


def prefect(env: dict[str, str], *args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PREFECT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_prefect_yaml_is_generated_from_the_recipes() -> None:
    assert (ROOT / "prefect.yaml").read_text() == prefect_yaml.render(), "run: python -m deployments.prefect_yaml"


def test_deployments_and_nightly_schedule(prefect_stack: dict[str, str]) -> None:
    listed = prefect(prefect_stack, "deployment", "ls")
    for name in ("rft/gsm8k", "rft/smoke", "rft/gsm8k-qwen", "rft/gsm8k-tinker", "rft/gsm8k-verl-lora"):
        assert name in listed.stdout, listed.stdout
    gsm8k = prefect(prefect_stack, "deployment", "inspect", "rft/gsm8k").stdout
    assert "0 2 * * *" in gsm8k and "'active': True" in gsm8k.replace('"', "'")


def test_smoke_deployment_runs_through_the_worker(prefect_stack: dict[str, str], tmp_path: Path) -> None:
    overrides = {"checkpoint_root_dir": str(tmp_path / "checkpoints"), "cluster.ray_address": "local"}
    run = prefect(
        prefect_stack, "deployment", "run", "rft/smoke", "--watch", "--param", f"overrides={json.dumps(overrides)}",
        timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "Completed" in run.stdout
    (summary_path,) = (tmp_path / "checkpoints" / "rft").glob("smoke-*/summary.json")  # one experiment per flow run
    summary = json.loads(summary_path.read_text())
    assert summary["steps"] == 2
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'checkpoints' / 'mlflow.db'}")
    mlflow_run = client.get_run(summary["mlflow_run_id"])
    assert mlflow_run.info.status == "FINISHED"
    assert {"config.json", "reward_curve.png"} <= {a.path for a in client.list_artifacts(mlflow_run.info.run_id)}
    assert [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "explore/reward_mean")] == [1, 2]


def test_gpu_deployment_fails_fast_without_gpus(prefect_stack: dict[str, str], tmp_path: Path) -> None:
    overrides = {"checkpoint_root_dir": str(tmp_path / "checkpoints"), "cluster.ray_address": "local"}
    started = time.time()
    run = prefect(
        prefect_stack, "deployment", "run", "rft/gsm8k-qwen", "--watch", "--param", f"overrides={json.dumps(overrides)}",
        timeout=600,
    )
    assert run.returncode != 0
    flow_run_id = next(line.split()[-1] for line in run.stdout.splitlines() if "UUID" in line)
    logs = prefect(prefect_stack, "flow-run", "logs", flow_run_id).stdout
    assert "needs GPUs" in logs and "cluster.gpu_per_node=2" in logs, logs[-3000:]
    assert not (tmp_path / "checkpoints" / "rft").exists()  # nothing started, nothing written
    print(f"GPU deployment refused after {time.time() - started:.0f} s")
