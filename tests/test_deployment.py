"""The CI smoke flow: deploy prefect.yaml to a real local Prefect server and run rft/smoke on a
process worker with `prefect deployment run rft/smoke --watch`, as a user would."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from checkpointing.layout import latest_step
from deployments import prefect_yaml
from tracking import PARENT_TAG, ROLE_TAG

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
PREFECT = str(Path(sys.executable).parent / "prefect")
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
# Planted Tinker keys: the workers' environment holds one, a Secret block the other; neither may show.
ENV_KEY = f"tml-env-{uuid.uuid4().hex}"
BLOCK_KEY = f"tml-block-{uuid.uuid4().hex}"
NO_SERVER = "http://127.0.0.1:9"  # the workers' TINKER_BASE_URL: nothing listens there
KILLED_RUN_STEPS = 6  # the killed runs' steps on the tiny model: a kill lands before the last (seconds each)


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
        # The workers ask for scheduled runs every second (Prefect's default is 10 s): each deployment run
        # and retry below starts a few seconds sooner; nothing else about them changes.
        worker_env = {**env, "TINKER_API_KEY": ENV_KEY, "TINKER_BASE_URL": NO_SERVER, "PREFECT_WORKER_QUERY_SECONDS": "1"}
        workers = [
            subprocess.Popen(
                [PREFECT, "worker", "start", "--pool", pool, "--type", "process"],
                env=worker_env, cwd=ROOT, stdout=open(logs / f"worker-{pool}.log", "w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            for pool in (prefect_yaml.CPU_POOL, prefect_yaml.GPU_POOL)
        ]
        yield env
    finally:
        stop_all([*workers, server])


def stop_all(procs: list[subprocess.Popen], grace_s: float = 10) -> None:
    """SIGTERM every process group at once, SIGKILL what still runs after `grace_s` (a worker still
    waiting on a flow run it started): one grace period in all, not one per process."""
    for proc in procs:
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def prefect(env: dict[str, str], *args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PREFECT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_deployments_and_nightly_schedule(prefect_stack: dict[str, str]) -> None:
    listed = prefect(prefect_stack, "deployment", "ls")
    for name in ("rft/gsm8k", "rft/smoke", "rft/hello", "rft/hello-tinker", "rft/gsm8k-qwen", "rft/gsm8k-tinker",
                 "rft/gsm8k-verl-lora", "rft/smoke-explore", "rft/smoke-train", "rft/q20", "rft/gsm8k-tools",
                 "rft/serve", "compare/smoke-trainers"):
        assert name in listed.stdout, listed.stdout
    gsm8k = prefect(prefect_stack, "deployment", "inspect", "rft/gsm8k").stdout
    assert "0 2 * * *" in gsm8k and "'active': True" in gsm8k.replace('"', "'")


def flow_run_process(flow_run_id: str) -> int | None:
    """The pid of the process the worker started for a flow run: the one process carrying the run's id
    whose parent does not. Every process it starts (Ray's workers, veRL's, vLLM's) inherits the id too, and
    pids are reused, so the lowest pid is not always the run's own (CI once killed a veRL worker instead)."""
    carriers: dict[int, int] = {}  # pid -> parent pid
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode() in (entry / "environ").read_bytes():
                    carriers[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    roots = [pid for pid, parent in carriers.items() if parent not in carriers]
    return roots[0] if len(roots) == 1 else None


def wait_until_gone(pid: int, timeout: float = 60) -> None:
    """A killed process is gone once its worker has reaped it: a retry before then shares the run id with
    a process still exiting, whose end the worker reports as the retry's crash."""
    deadline = time.time() + timeout
    while (Path("/proc") / str(pid)).exists():  # a zombie too: not yet reaped
        if time.time() > deadline:
            pytest.fail(f"process {pid} still there {timeout} s after SIGKILL")
        time.sleep(0.2)


def logs_with_subflows(env: dict[str, str], flow_run_id: str) -> str:
    """The logs of a flow run and of its subflow runs (`prefect flow-run logs` shows one run's only)."""
    request = urllib.request.Request(
        f"{env['PREFECT_API_URL']}/flow_runs/filter", headers={"Content-Type": "application/json"},
        data=json.dumps({"flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}}}).encode())
    with urllib.request.urlopen(request, timeout=10) as response:
        children = [run["id"] for run in json.load(response)]
    return "\n".join(prefect(env, "flow-run", "logs", run).stdout for run in [flow_run_id, *children])


def why_it_ended(env: dict[str, str], flow_run_id: str) -> str:
    """What a failed assertion on a run's end shows: the tails of its logs and of the workers' logs (a
    CRASHED run's own logs stop where its process died; the worker logs the exit code)."""
    home = Path(env["PREFECT_HOME"])
    workers = "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in sorted((home / "logs").glob("worker-*.log")))
    return f"--- the run's logs\n{logs_with_subflows(env, flow_run_id)[-6000:]}\n{workers}"


def state_of(env: dict[str, str], flow_run_id: str) -> str:
    """The flow run's state type, from the server's REST API (a `prefect flow-run inspect` process takes seconds)."""
    try:
        with urllib.request.urlopen(f"{env['PREFECT_API_URL']}/flow_runs/{flow_run_id}", timeout=10) as response:
            return (json.load(response).get("state") or {}).get("type", "?")
    except OSError:
        return "?"


def wait_for_state(env: dict[str, str], flow_run_id: str, states: set[str], timeout: float) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = state_of(env, flow_run_id)
        if state in states:
            return state
        time.sleep(1)
    pytest.fail(f"flow run {flow_run_id} still {state_of(env, flow_run_id)} after {timeout} s")


def test_smoke_deployment_on_verl_killed_mid_step_and_retried_resumes(prefect_stack: dict[str, str], tmp_path: Path,
                                                                     tiny_model_path: str) -> None:
    """The CI smoke flow as `--set trainer.trainer_type=verl` runs it (veRL's FSDP workers on gloo), and what a
    retry from the UI does: SIGKILL the run's process once step 2 is under way, `prefect flow-run retry` it, and
    it finishes from its latest checkpoint through the worker. (The torch trainer's deployment killed and
    retried: the explore/train pair below, whose trainer side it is.)"""
    root = tmp_path / "checkpoints"
    # The tiny model, no evaluation and 16-token answers: this run is about the kill and the retry (the
    # evaluations and the recipe's 32-token answers are checked in process by tests/test_rft_flow.py). Its steps
    # take seconds, so the run has KILLED_RUN_STEPS of them: the kill lands before the last one, in whichever
    # step, and the retry must resume after the checkpoint that was the latest when the process died.
    overrides = {"checkpoint_root_dir": str(root), "cluster.ray_address": "local", "explorer.eval_on_startup": False,
                 "buffer.explorer_input.eval_tasksets": [], "model.max_response_tokens": 16,
                 "model.model_path": tiny_model_path, "buffer.total_steps": KILLED_RUN_STEPS,
                 "trainer.trainer_type": "verl"}
    started = prefect(prefect_stack, "deployment", "run", "rft/smoke", "--param", f"overrides={json.dumps(overrides)}")
    assert started.returncode == 0, started.stdout + started.stderr
    flow_run_id = next(line.split()[-1] for line in started.stdout.splitlines() if "UUID" in line)

    deadline, polls = time.time() + 900, 0
    while time.time() < deadline:  # step 2's rollouts are in the buffer, its training is not done
        dbs = list(root.glob("rft/smoke-*/buffer/experiences.db"))
        if dbs and (dbs[0].parent.parent / "global_step_1").is_dir():
            with sqlite3.connect(dbs[0], timeout=30) as conn:
                if conn.execute("SELECT COUNT(*) FROM experiences WHERE explore_step = 2").fetchone()[0]:
                    break
        polls += 1
        if polls % 20 == 0 and state_of(prefect_stack, flow_run_id) in TERMINAL:  # ended before step 2
            logs = prefect(prefect_stack, "flow-run", "logs", flow_run_id).stdout
            pytest.fail(f"the smoke run ended before step 2: {state_of(prefect_stack, flow_run_id)}\n{logs[-4000:]}")
        time.sleep(0.5)
    (experiment,) = root.glob("rft/smoke-*")
    resumed_after = kill_and_retry(prefect_stack, flow_run_id, experiment)
    assert resumed_after is not None
    ended = wait_for_state(prefect_stack, flow_run_id, {"COMPLETED", "FAILED", "CRASHED"}, 900)
    assert ended == "COMPLETED", f"the retry ended {ended}\n{why_it_ended(prefect_stack, flow_run_id)}"
    logs = prefect(prefect_stack, "flow-run", "logs", flow_run_id).stdout
    assert f"resuming after step {resumed_after}:" in logs
    assert_the_worker_ran_the_crashed_hook(prefect_stack)

    (summary_path,) = root.glob("rft/smoke-*/summary.json")  # one experiment for the run and its retry
    summary = json.loads(summary_path.read_text())
    assert summary["steps"] == KILLED_RUN_STEPS
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("rft").experiment_id])
    (mlflow_run,) = [r for r in runs if r.data.tags[ROLE_TAG] == "main"]  # continued by the retry, not duplicated
    (parent,) = [r for r in runs if r.data.tags[ROLE_TAG] == "experiment"]  # the experiment's run, nesting it
    assert mlflow_run.data.tags[PARENT_TAG] == parent.info.run_id and parent.info.status == "FINISHED"
    assert mlflow_run.info.run_id == summary["mlflow_run_id"] and mlflow_run.info.status == "FINISHED"
    assert {"config.json", "reward_curve.png"} <= {a.path for a in client.list_artifacts(mlflow_run.info.run_id)}
    steps = list(range(1, KILLED_RUN_STEPS + 1))
    assert sorted({m.step for m in client.get_metric_history(mlflow_run.info.run_id, "explore/reward_mean")}) == steps
    with sqlite3.connect(summary_path.parent / "buffer" / "experiences.db") as conn:
        rows = conn.execute("SELECT eid, train_step FROM experiences").fetchall()
    assert len(rows) == len({eid for eid, _ in rows}) == KILLED_RUN_STEPS * 2 * 2  # steps × tasks × repeat_times
    assert sorted(step for _, step in rows) == [s for s in steps for _ in range(4)]  # each trained once
    assert_every_task_used_equally([eid for eid, _ in rows])


def assert_every_task_used_equally(eids: list[str]) -> None:
    """Each of the run's tasks (2 a step) sampled repeat_times (2) times: none twice after the retry, none lost."""
    task_uses = Counter(eid.split("@")[0] for eid in eids)  # eid = "{task_id}@{step}/{group}/{i}"
    assert len(task_uses) == KILLED_RUN_STEPS * 2 and set(task_uses.values()) == {2}


def assert_the_worker_ran_the_crashed_hook(env: dict[str, str]) -> None:
    """The worker ran a crashed run's on_crashed hook itself (its process was gone), calling it by keyword."""
    worker_log = (Path(env["PREFECT_HOME"]) / "logs" / f"worker-{prefect_yaml.CPU_POOL}.log").read_text()
    assert "Running hook '_release' in response to entering state 'Crashed'" in worker_log
    assert "error was encountered while running hook" not in worker_log, worker_log[-4000:]


def start_deployment(env: dict[str, str], deployment: str, overrides: dict) -> str:
    started = prefect(env, "deployment", "run", deployment, "--param", f"overrides={json.dumps(overrides)}")
    assert started.returncode == 0, started.stdout + started.stderr
    return next(line.split()[-1] for line in started.stdout.splitlines() if "UUID" in line)


HOOK_ENDED = ("Hook '_release' finished running successfully", "error was encountered while running hook '_release'")


def hooks_ended(env: dict[str, str]) -> int:
    """How many times the rft flow's state hook has ended, in the workers' logs."""
    logs = "".join(log.read_text(errors="replace") for log in (Path(env["PREFECT_HOME"]) / "logs").glob("worker-*.log"))
    return sum(logs.count(line) for line in HOOK_ENDED)


def kill_and_retry(env: dict[str, str], flow_run_id: str, experiment: Path) -> int | None:
    """SIGKILL the flow run's process, as a crash would, and retry it as the UI's Retry does: once the process
    is gone and the worker has run the crashed run's hook (it frees what the run held; a retry racing it
    could lose its new engines' shared memory to it). Returns the step the retry resumes after: the latest
    checkpoint once the process is gone, before the retry can write one (None: none yet, as for an explorer)."""
    pid = flow_run_process(flow_run_id)
    assert pid is not None, "the flow run's process was not found"
    ended_before = hooks_ended(env)
    os.kill(pid, signal.SIGKILL)
    assert wait_for_state(env, flow_run_id, {"CRASHED", "FAILED"}, 180) == "CRASHED"
    wait_until_gone(pid)
    resumes_after = latest_step(experiment)
    assert resumes_after is None or 1 <= resumes_after < KILLED_RUN_STEPS, resumes_after  # killed before the end
    deadline = time.time() + 120
    while hooks_ended(env) == ended_before:
        if time.time() > deadline:
            pytest.fail("the worker did not run the crashed run's state hook within 120 s")
        time.sleep(0.5)
    retried = prefect(env, "flow-run", "retry", flow_run_id)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    return resumes_after


@pytest.mark.full  # two deployments killed and retried, ~3 min: scripts/test.sh --full
def test_explore_and_train_deployments_killed_and_retried_finish_together(prefect_stack: dict[str, str], tmp_path: Path,
                                                                          tiny_model_path: str) -> None:
    """rft/smoke-explore and rft/smoke-train share one experiment (smoke-split, here on the tiny model with
    KILLED_RUN_STEPS steps). The trainer is killed once it has a checkpoint and explore step 2 is in, the
    explorer once the trainer's retry has published weights and before the last step is explored; both are
    retried and the two finish together: every explore step in the buffer once, every experience trained once,
    by its step. The trainer side is the torch trainer's deployment killed and retried: its MLflow run is
    continued, not duplicated, as the veRL smoke deployment's is above."""
    root = tmp_path / "checkpoints"
    overrides = {"checkpoint_root_dir": str(root), "cluster.ray_address": "local", "model.model_path": tiny_model_path,
                 "buffer.total_steps": KILLED_RUN_STEPS}
    explorer = start_deployment(prefect_stack, "rft/smoke-explore", overrides)
    trainer = start_deployment(prefect_stack, "rft/smoke-train", overrides)
    exp = root / "rft" / "smoke-split"

    def explored(step: int) -> bool:
        db = exp / "buffer" / "experiences.db"
        if not db.exists():
            return False
        with sqlite3.connect(db, timeout=30) as conn:
            return conn.execute("SELECT COUNT(*) FROM experiences WHERE explore_step = ?", (step,)).fetchone()[0] > 0

    def until(condition, what: str, runs=(explorer, trainer)) -> None:  # noqa: ANN001
        deadline = time.time() + 900
        while not condition():
            ended = [r for r in runs if state_of(prefect_stack, r) in TERMINAL]
            if ended or time.time() > deadline:
                logs = "\n".join(prefect(prefect_stack, "flow-run", "logs", r).stdout[-3000:] for r in runs)
                pytest.fail(f"waiting for {what}; ended: {ended}\n{logs}")
            time.sleep(0.5)

    until(lambda: (exp / "global_step_1").is_dir() and explored(2), "the trainer's step-1 checkpoint")
    resumed_after = kill_and_retry(prefect_stack, trainer, exp)  # it trains a step, or waits for the explorer's next
    assert resumed_after is not None
    published = exp / "sync" / "published.json"
    def published_at() -> int:
        return published.stat().st_mtime_ns if published.exists() else 0

    published_before = published_at()
    # The explorer waits for the trainer's weights, so it cannot pass the last step before the retried trainer runs
    until(lambda: published_at() != published_before and not explored(KILLED_RUN_STEPS),
          "the retried trainer's first published weights", runs=(explorer,))
    kill_and_retry(prefect_stack, explorer, exp)
    for run in (explorer, trainer):
        assert wait_for_state(prefect_stack, run, {"COMPLETED", "FAILED", "CRASHED"}, 900) == "COMPLETED", (
            prefect(prefect_stack, "flow-run", "logs", run).stdout[-4000:])
    assert f"resuming after step {resumed_after}:" in prefect(prefect_stack, "flow-run", "logs", trainer).stdout
    assert json.loads((exp / "summary.json").read_text())["steps"] == KILLED_RUN_STEPS
    with sqlite3.connect(exp / "buffer" / "experiences.db") as conn:
        rows = conn.execute("SELECT eid, explore_step, train_step FROM experiences").fetchall()
    assert len(rows) == len({eid for eid, _, _ in rows}) == KILLED_RUN_STEPS * 2 * 2  # steps × tasks × repeats, once each
    assert all(explore == trained for _, explore, trained in rows)  # each trained once, by its own step
    assert_every_task_used_equally([eid for eid, _, _ in rows])
    assert_the_worker_ran_the_crashed_hook(prefect_stack)
    # Each side's MLflow run is continued by its retry, not duplicated, under the experiment's run
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("rft").experiment_id])
    by_role = Counter(r.data.tags[ROLE_TAG] for r in runs)
    assert by_role == {"main": 1, "explorer": 1, "experiment": 1}, by_role
    (parent,) = [r for r in runs if r.data.tags[ROLE_TAG] == "experiment"]
    steps = list(range(1, KILLED_RUN_STEPS + 1))
    for role, metric in (("main", "train/loss"), ("explorer", "explore/reward_mean")):
        (run,) = [r for r in runs if r.data.tags[ROLE_TAG] == role]
        assert run.data.tags[PARENT_TAG] == parent.info.run_id and run.info.status == "FINISHED", role
        assert sorted({m.step for m in client.get_metric_history(run.info.run_id, metric)}) == steps, role


def failed_run_logs(env: dict[str, str], deployment: str, checkpoints: Path) -> str:
    """Run a deployment that must fail (`--watch` exits non-zero) and return its flow run's logs."""
    overrides = {"checkpoint_root_dir": str(checkpoints), "cluster.ray_address": "local"}
    run = prefect(env, "deployment", "run", deployment, "--watch", "--param", f"overrides={json.dumps(overrides)}", timeout=600)
    assert run.returncode != 0
    flow_run_id = next(line.split()[-1] for line in run.stdout.splitlines() if "UUID" in line)
    return prefect(env, "flow-run", "logs", flow_run_id).stdout


def test_gpu_deployment_fails_fast_without_gpus(prefect_stack: dict[str, str], tmp_path: Path) -> None:
    started = time.time()
    logs = failed_run_logs(prefect_stack, "rft/gsm8k-qwen", tmp_path / "checkpoints")
    assert "needs GPUs" in logs and "cluster.gpu_per_node=2" in logs, logs[-3000:]
    assert not (tmp_path / "checkpoints" / "rft").exists()  # nothing started, nothing written
    print(f"GPU deployment refused after {time.time() - started:.0f} s")


def uniform_checkpoint(experiment: Path, step: int) -> None:
    """A converted checkpoint of SmolLM2 whose final norm is zero: its logits are all 0, so every token
    it samples has logprob -log(vocab size). Served weights that are not the base model's show."""
    import torch
    from safetensors.torch import load_file, save_file

    from checkpointing.loaders import TORCH_FORMAT
    from checkpointing.models import resolve_model_path

    base = resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")
    actor = experiment / f"global_step_{step}" / "actor"
    hf = actor / "huggingface"
    hf.mkdir(parents=True)
    for item in base.iterdir():
        if item.is_file() and item.suffix != ".safetensors":
            (hf / item.name).symlink_to(item.resolve())
    weights = load_file(str(base / "model.safetensors"))
    weights["model.norm.weight"] = torch.zeros_like(weights["model.norm.weight"])
    save_file(weights, str(hf / "model.safetensors"), metadata={"format": "pt"})
    (actor / "trainer_state.json").write_text(json.dumps({"format": TORCH_FORMAT, "global_step": step, "lora": None}))
    (experiment / "latest_checkpointed_iteration.txt").write_text(str(step))


def test_serve_deployment_answers_with_the_latest_weights_and_stops_when_cancelled(
    prefect_stack: dict[str, str], tmp_path: Path
) -> None:
    """`prefect deployment run rft/serve`: the endpoint's address is in the run's logs and artifact, the
    `openai` client gets answers from the experiment's latest checkpoint, and cancelling the run stops
    the engine (its port closes) and the run's process."""
    import math

    import openai

    root = tmp_path / "checkpoints"
    uniform_checkpoint(root / "rft" / "served", step=3)
    overrides = {"checkpoint_root_dir": str(root), "name": "served", "cluster.ray_address": "local"}
    started = prefect(prefect_stack, "deployment", "run", "rft/serve", "--param", f"overrides={json.dumps(overrides)}")
    assert started.returncode == 0, started.stdout + started.stderr
    flow_run_id = next(line.split()[-1] for line in started.stdout.splitlines() if "UUID" in line)

    deadline, url = time.time() + 600, None
    while url is None and time.time() < deadline:
        logs = logs_with_subflows(prefect_stack, flow_run_id)  # the serve subflow announces the address
        found = [line.split(" at ")[-1].strip() for line in logs.splitlines() if "engine 0 serves" in line]
        if found:
            url = found[0]
        elif state_of(prefect_stack, flow_run_id) in TERMINAL:
            pytest.fail(f"the serve run ended: {state_of(prefect_stack, flow_run_id)}\n{logs[-4000:]}")
        else:
            time.sleep(3)
    assert url and url.startswith("http://127.0.0.1:"), "no endpoint address in the logs"
    assert "rft/served step 3" in logs

    client = openai.OpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                           temperature=1.0, logprobs=True)
    logprobs = [t.logprob for t in reply.choices[0].logprobs.content]
    assert logprobs and all(abs(lp + math.log(49152)) < 1e-3 for lp in logprobs)  # the checkpoint's weights
    assert client.models.list().data[0].id == "HuggingFaceTB/SmolLM2-135M-Instruct"

    pid = flow_run_process(flow_run_id)
    cancelled = prefect(prefect_stack, "flow-run", "cancel", flow_run_id)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert wait_for_state(prefect_stack, flow_run_id, {"CANCELLED", "CRASHED", "FAILED", "COMPLETED"}, 180) == "CANCELLED"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            client.models.list()
        except openai.APIConnectionError:
            break
        time.sleep(2)
    else:
        pytest.fail(f"{url} still answers after the run was cancelled")
    while pid is not None and Path(f"/proc/{pid}").exists() and time.time() < deadline:
        time.sleep(1)
    assert pid is None or not Path(f"/proc/{pid}").exists(), "the serve run's process outlived its cancellation"


def files_holding(root: Path, secret: str, skip: Path | None = None) -> list[str]:
    """Every file under `root` (but weight and optimizer files) whose bytes contain `secret`."""
    needle = secret.encode()
    found = []
    for path in root.rglob("*"):
        if not path.is_file() or path.suffix in (".safetensors", ".pt") or (skip and skip in path.parents):
            continue
        try:
            if needle in path.read_bytes():
                found.append(str(path))
        except OSError:
            continue
    return found


def test_tinker_key_is_read_from_env_or_secret_block_and_never_shown(
    prefect_stack: dict[str, str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Runs last: the Tinker recipe reads the key, and with the workers' TINKER_BASE_URL pointing at no
    server its first task fails within seconds, saying where it looked and where the key came from;
    no log, parameter, artifact, MLflow store or checkpoint of any run of this module holds either key."""

    def run_tinker() -> str:
        started = time.time()
        logs = failed_run_logs(prefect_stack, "rft/gsm8k-tinker", tmp_path / "checkpoints")
        assert f"the Tinker server is not reachable at {NO_SERVER} (from $TINKER_BASE_URL)" in logs, logs[-3000:]
        assert time.time() - started < 120, "the run did not fail fast"
        return logs

    from_env = run_tinker()
    assert "API key from $TINKER_API_KEY" in from_env
    save_block = "import sys; from prefect.blocks.system import Secret; Secret(value=sys.argv[1]).save('tinker-api-key', overwrite=True)"
    subprocess.run([sys.executable, "-c", save_block, BLOCK_KEY], env=prefect_stack, check=True, capture_output=True)
    from_block = run_tinker()
    assert "API key from the Prefect Secret block 'tinker-api-key'" in from_block
    assert not (tmp_path / "checkpoints" / "rft").exists()  # nothing started, nothing written

    for logs in (from_env, from_block):
        assert ENV_KEY not in logs and BLOCK_KEY not in logs
    everything = tmp_path_factory.getbasetemp()  # Prefect's database and logs, every run's checkpoints and MLflow
    assert files_holding(everything, ENV_KEY) == []
    # The block's own record is where Prefect keeps the secret; anywhere else it is a leak.
    assert files_holding(everything, BLOCK_KEY, skip=Path(prefect_stack["PREFECT_HOME"])) == []
