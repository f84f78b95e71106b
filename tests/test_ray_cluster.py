"""A real two-node Ray cluster on this machine (`ray start --head`, then a second `ray start --address`
with its own CPU and a `node2` resource): `rft run` joins it by address, a mistake in the config ends
before any actor is created, the smoke recipe runs its two engines on both nodes, and a cluster that
goes away mid-run fails the run with its address named.

The nodes use token authentication (a token of this test only): Ray listens on every interface."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# In `scripts/test.sh --full` only: two Ray nodes and two smoke runs on 2 cores take minutes beyond the
# default suite's budget.
pytestmark = [pytest.mark.slow, pytest.mark.full]
ROOT = Path(__file__).resolve().parent.parent
RAY = str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """Stop a `ray start --block` and every process it started (its own session), nothing else."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the node drains, then stops its processes
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever outlived it
    except ProcessLookupError:
        pass


def reload_ray_auth() -> None:
    """Make this process read the auth settings of its environment again: Ray caches the token (and the mode) at
    the first use, so after an earlier test's local Ray in the same pytest process it would send none."""
    from ray._private.authentication_test_utils import reset_auth_token_state

    reset_auth_token_state()


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[dict]:
    """A two-node cluster; its Ray logs (temp/session_latest/logs, the Ray Client server's among them) are kept
    when a test of the module failed."""
    failed = request.session.testsfailed
    temp = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: Ray's socket paths are limited
    (temp / "token").write_text(uuid.uuid4().hex)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(temp / "token")}
    saved = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)  # this process asks the cluster's state API too
    reload_ray_auth()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    port, dashboard, client = free_port(), free_port(), free_port()
    nodes: list[subprocess.Popen] = []

    def start(*args: str, log: str) -> None:
        nodes.append(subprocess.Popen([RAY, "start", *args, "--block"], env=env, cwd=ROOT, start_new_session=True,
                                      stdout=open(temp / log, "w"), stderr=subprocess.STDOUT))

    try:
        start("--head", "--port", str(port), "--num-cpus", "1", "--temp-dir", str(temp), "--dashboard-host", "127.0.0.1",
              "--dashboard-port", str(dashboard), "--ray-client-server-port", str(client), log="head.log")
        info = {"env": env, "address": f"127.0.0.1:{port}", "client": f"ray://127.0.0.1:{client}",
                "dashboard": f"http://127.0.0.1:{dashboard}", "nodes": nodes}
        wait_for(lambda: len(alive_nodes(info)) == 1, 180, temp / "head.log")
        start("--address", f"127.0.0.1:{port}", "--num-cpus", "1", "--resources", json.dumps({"node2": 1}), log="node2.log")
        wait_for(lambda: len(alive_nodes(info)) == 2, 180, temp / "node2.log")
        yield info
    finally:
        for node in reversed(nodes):
            stop(node)
        if request.session.testsfailed == failed:
            shutil.rmtree(temp, ignore_errors=True)
        else:
            print(f"the cluster's Ray logs are kept in {temp}")
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        reload_ray_auth()  # the tests after this module run their own Ray without a token


def wait_for(condition, timeout: float, log: Path) -> None:  # noqa: ANN001
    deadline, last = time.time() + timeout, None
    while time.time() < deadline:
        try:
            if condition():
                return
        except Exception as err:  # noqa: BLE001 - not up yet
            last = err
        time.sleep(2)
    pytest.fail(f"the Ray cluster did not come up ({last!r}): {log.read_text()[-3000:]}")


def alive_nodes(cluster: dict) -> list[dict]:
    from ray.util.state import list_nodes

    return [n for n in list_nodes(address=cluster["dashboard"], raise_on_missing_output=False) if n.state == "ALIVE"]


def actors(cluster: dict, prefix: str) -> list:
    from ray.util.state import list_actors

    return [a for a in list_actors(address=cluster["dashboard"], limit=1000, raise_on_missing_output=False)
            if (a.name or "").startswith(prefix)]


def rft_run(cluster: dict, root: Path, *settings: str, env: dict | None = None, address: str | None = None,
            timeout: int = 900) -> tuple[int, str, str, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "run", "smoke", "--set", f"checkpoint_root_dir={root}",
         "--set", f"cluster.ray_address={address or cluster['client']}", *[a for s in settings for a in ("--set", s)]],
        env={**cluster["env"], **(env or {})}, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


def closed_port() -> int:
    return free_port()


def bad_jsonl(path: Path) -> str:
    rows = (ROOT / "data/gsm8k/train.jsonl").read_text().splitlines()[:3]
    path.write_text("\n".join([rows[0], rows[1], '{"question": "1 + 1?", "answer": "2"', rows[2]]) + "\n")
    return str(path)


def test_mistakes_end_the_run_before_any_actor_starts(cluster: dict, tmp_path: Path) -> None:
    """A missing model folder, a malformed taskset line and MLflow down, at once: each named in the
    run's final message, and Ray's state API shows no actor of the run (no engine, no trainer)."""
    mlflow = f"http://127.0.0.1:{closed_port()}"
    rc, out, err, seconds = rft_run(cluster, tmp_path / "checkpoints", "name=bad", "model.model_path=/nowhere/model",
                                    f"buffer.explorer_input.taskset.path={bad_jsonl(tmp_path / 'bad.jsonl')}",
                                    env={"MLFLOW_TRACKING_URI": mlflow})
    print(f"rft run with 3 mistakes on the cluster ended after {seconds:.0f} s")
    assert rc == 1, out[-3000:] + err[-3000:]
    final = err.split("rft/bad failed: ")
    assert len(final) == 2, err[-5000:]
    for expected in ("model.model_path: '/nowhere/model': no such folder", "bad.jsonl: malformed JSON on line 3",
                     f"MLFLOW_TRACKING_URI: {mlflow}"):
        assert expected in final[1], err[-5000:]
    assert "Traceback" not in out + err, (out + err)[-5000:]
    assert actors(cluster, "rft-bad") == []  # no engine, no trainer: nothing was started


def test_smoke_runs_its_engines_on_both_nodes(cluster: dict, tmp_path: Path, tiny_model_path: str) -> None:
    # the tiny model (tests/tiny_model.py): where the engines run is checked, not what they sample
    rc, out, err, seconds = rft_run(
        cluster, tmp_path / "checkpoints", "name=two-nodes", f"model.model_path={tiny_model_path}", "cluster.node_num=2",
        "explorer.rollout_model.engine_num=2",
        "explorer.rollout_model.kv_cache_memory_gb=0.5", "synchronizer.sync_method=checkpoint", address=cluster["address"],
    )
    print(f"smoke on two nodes: {seconds:.0f} s")
    assert rc == 0, out[-5000:] + err[-5000:]
    assert "Traceback" not in out + err, (out + err)[-5000:]  # no Prefect-internal traceback on a clean run
    engines = actors(cluster, "rft-two-nodes-rollout-")
    assert sorted(a.name for a in engines) == ["rft-two-nodes-rollout-0", "rft-two-nodes-rollout-1"]
    assert {a.node_id for a in engines} == {n.node_id for n in alive_nodes(cluster)}  # one engine on each node
    assert [a.state for a in actors(cluster, "rft-two-nodes-trainer")] == ["DEAD"]  # released at the end
    shutil.rmtree(tmp_path / "checkpoints", ignore_errors=True)


def test_a_cluster_that_goes_away_is_named(cluster: dict, tmp_path: Path, tiny_model_path: str) -> None:
    """Runs last: it stops the cluster in the middle of a run that joined it through Ray Client (the tiny model's
    steps take about a second: 200 of them outlast the kill)."""
    root = tmp_path / "checkpoints"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "run", "smoke", "--set", f"checkpoint_root_dir={root}", "--set", "name=lost",
         "--set", f"cluster.ray_address={cluster['client']}", "--set", f"model.model_path={tiny_model_path}",
         "--set", "buffer.total_steps=200"],
        env=cluster["env"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.time() + 600
        while not (root / "rft" / "lost" / "global_step_1").is_dir():
            assert proc.poll() is None and time.time() < deadline, "the run ended (or hung) before step 1"
            time.sleep(1)
        for node in reversed(cluster["nodes"]):
            os.killpg(node.pid, signal.SIGKILL)
        lost = time.monotonic()
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    final = [line for line in err.splitlines() if line.startswith("rft/lost failed: ")]
    print(f"run failed {time.monotonic() - lost:.0f} s after the cluster went away: {final}")
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    assert len(final) == 1 and f"the Ray cluster at {cluster['client']}" in final[0], err[-5000:]
    shutil.rmtree(root, ignore_errors=True)
