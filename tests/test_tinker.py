"""The Tinker backend against the local Tinker server (scripts/tinker-server.sh, started once per session by
the `tinker_server` fixture of conftest.py, which enforces a key as the hosted service does):

- a missing, malformed or refused key and an unreachable server fail the first call within seconds;
- the backend contract (tests/policy_contract.py) against a Tinker policy;
- `rft run hello --set model.tinker.enable=true`: SIGKILLed after its step-1 checkpoint and run again,
  it resumes and finishes; MLflow has the metrics, no vLLM or Ray was started, and `rft convert` downloads
  the final adapter and merges it into a model that learned (step 1's better answers made likelier);
- an SFT warm-up → GRPO run in stages: the GRPO stage starts from the SFT stage's Tinker state.
- dynamic sampling in a whole run (tests/dynamic_sampling_layout.py's layout), on this module's server.

Shapes stay fixed (one prompt bucket, 8 samples, batches padded) so the server compiles each program
once. Measured on 2 shared cores: ~45 s to start the server, then ~6 min (contract ~95 s, hello's two runs
~250 s); `scripts/test.sh --full` adds ~2.5 min.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from backends.policy import Policy, policy_for
from buffer.experience import Experience
from buffer.experience_store import ExperienceStore
from checkpointing.models import resolve_model_path
from deployments import load_recipe
from schemas import ExperimentConfig
from tests import dynamic_sampling_layout as dynamic_sampling
from tests import policy_contract
from tests.conftest import TINKER_TEST_KEY
from workflows.render import ChatRenderer, renderer_for

ROOT = Path(__file__).resolve().parent.parent


def hello(**overrides: object) -> ExperimentConfig:
    return load_recipe("hello").with_overrides({"model.tinker.enable": True, **overrides})


@pytest.fixture
def server_env(tinker_server: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("TINKER_BASE_URL", tinker_server["TINKER_BASE_URL"])
    monkeypatch.setenv("TINKER_API_KEY", TINKER_TEST_KEY)
    return tinker_server


# ----------------------------------------------------------------------------- failing fast
def test_an_unreachable_server_or_a_bad_key_fails_within_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.tinker.connection import TinkerUnavailableError, endpoint
    from schemas.secrets import MissingSecretError

    monkeypatch.setenv("TINKER_BASE_URL", "http://127.0.0.1:9")
    with pytest.raises(MissingSecretError, match="TINKER_API_KEY or TRINITY_API_KEY"):
        policy_for(hello()).connect()
    monkeypatch.setenv("TRINITY_API_KEY", "tml-from-trinity")
    assert endpoint(None).key_source == "$TRINITY_API_KEY"
    monkeypatch.setenv("TINKER_API_KEY", "sk-not-tinkers")
    with pytest.raises(TinkerUnavailableError, match=r"key from \$TINKER_API_KEY does not start with 'tml-'"):
        policy_for(hello()).connect()
    monkeypatch.setenv("TINKER_API_KEY", "tml-some-key")
    started = time.monotonic()
    with pytest.raises(TinkerUnavailableError, match=r"not reachable at http://127.0.0.1:9 \(from \$TINKER_BASE_URL\)"):
        policy_for(hello()).connect()
    assert time.monotonic() - started < 10


@pytest.mark.slow
@pytest.mark.tinker
def test_a_refused_key_or_an_unserved_model_fails_at_once(server_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.tinker.connection import TinkerUnavailableError

    monkeypatch.setenv("TINKER_API_KEY", "tml-wrong")
    started = time.monotonic()
    with pytest.raises(TinkerUnavailableError, match=r"rejected the API key from \$TINKER_API_KEY \(HTTP 401\)"):
        policy_for(hello()).connect()
    assert time.monotonic() - started < 10
    monkeypatch.setenv("TINKER_API_KEY", TINKER_TEST_KEY)
    with pytest.raises(TinkerUnavailableError, match="'meta-llama/Llama-3.2-3B' is not served .* it serves: HuggingFaceTB/SmolLM2"):
        policy_for(load_recipe("gsm8k-tinker")).connect()


# ----------------------------------------------------------------------------- the backend contract
@pytest.fixture(scope="module")
def renderer() -> ChatRenderer:
    return renderer_for(load_recipe("hello").model.model_path)


@pytest.mark.slow
@pytest.mark.tinker
class TestContract:
    """tests/policy_contract.py against a Tinker policy (released when the class is done: LoRA slots)."""

    @pytest.fixture(scope="class")
    def policy(self, tinker_server: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Policy]:
        env = {"TINKER_BASE_URL": tinker_server["TINKER_BASE_URL"], "TINKER_API_KEY": TINKER_TEST_KEY}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        # the contract trains toward a target answer in a few steps
        config = hello(name="contract", checkpoint_root_dir=str(tmp_path_factory.mktemp("contract")),
                       **{"algorithm.optimizer.lr": 2e-3, "model.tinker.rank": 8})
        policy = policy_for(config)
        model_dir = str(resolve_model_path(config.model.model_path))
        try:
            policy.connect()
            policy.start_engines(model_dir)
            policy.start_trainer(model_dir, total_steps=100)
            yield policy
        finally:
            policy.release()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def test_train_step_changes_logprobs(self, policy: Policy, renderer: ChatRenderer) -> None:
        policy_contract.check_train_step_changes_logprobs(policy, renderer)

    def test_checkpoint_round_trip(self, policy: Policy, renderer: ChatRenderer, tmp_path: Path) -> None:
        policy_contract.check_checkpoint_round_trip(policy, renderer, tmp_path / "actor")
        assert json.loads((tmp_path / "actor" / "tinker_state.json").read_text())["state_path"].startswith("tinker://")

    def test_published_weights_change_samples(self, policy: Policy, renderer: ChatRenderer) -> None:
        policy_contract.check_published_weights_change_samples(policy, renderer)
        [engine] = policy.engines()
        assert engine.info()["device"] == "tinker"


@pytest.mark.slow
@pytest.mark.tinker
@pytest.mark.full  # CI's 90 minutes: scripts/test.sh --full (docs/testing.md, 2026-11-29)
def test_kl_in_the_reward_is_scored_by_the_starting_weights_on_the_service(server_env: dict[str, str], tmp_path: Path,
                                                                            renderer: ChatRenderer) -> None:
    """algorithm.kl_penalty_fn on Tinker: the reference is a sampling client of the stage's starting weights
    (here the base model). Before any step it scores the batch as the trainer does, so the first step's KL
    is ~0; after steps that move the policy the KL is above 0 and the penalised reward below the reward."""
    import dataclasses

    from backends.tinker.trainer import TinkerTrainer

    config = hello(name="kl", checkpoint_root_dir=str(tmp_path), **{
        "algorithm.optimizer.lr": 2e-3, "model.tinker.rank": 8,
        "algorithm.kl_penalty_fn": "k2", "algorithm.kl_penalty_fn_args": {"kl_coef": 0.1}})
    trainer = TinkerTrainer(config, resolve_model_path(config.model.model_path), total_steps=10)
    right = policy_contract.target_experience(renderer, eid="kl-0")
    ids = renderer.encode("The answer is 7.")
    wrong = Experience(eid="kl-1", task_id=right.task_id, group_id=right.group_id, prompt_token_ids=right.prompt_token_ids,
                       response_token_ids=ids, logprobs=[0.0] * len(ids), reward=0.0, advantage=-1.0)
    try:
        batch = [dataclasses.replace(e, logprobs=lp) for e, lp in zip((right, wrong), trainer.logprobs([right, wrong]),
                                                                        strict=True)]
        reference = trainer.reference_logprobs(batch)
        for ref, current in zip(reference, (e.logprobs for e in batch), strict=True):
            assert len(ref) == len(current) and max(abs(a - b) for a, b in zip(ref, current, strict=True)) < 0.05
        first = trainer.train_step(batch)
        assert first["kl_penalty"] < 1e-3 and first["kl_penalty_coef"] == 0.1, first
        for _ in range(3):  # each step on the current policy's logprobs, as fresh rollouts would carry
            batch = [dataclasses.replace(e, logprobs=lp) for e, lp in zip(batch, trainer.logprobs(batch), strict=True)]
            last = trainer.train_step(batch)
        assert last["kl_penalty"] > 10 * max(first["kl_penalty"], 1e-4), (first, last)
        assert last["reward_after_kl"] < last["reward_before_kl"]
    finally:
        trainer.close()
    # a KL term in the loss: the same reference, in our loss through forward_backward_custom
    config = config.with_overrides({"algorithm.kl_penalty_fn": "none", "algorithm.kl_penalty_fn_args": {"kl_coef": 0.0},
                                    "algorithm.kl_loss_fn": "k2", "algorithm.kl_loss_fn_args": {"kl_coef": 0.1}})
    trainer = TinkerTrainer(config, resolve_model_path(config.model.model_path), total_steps=10)
    try:
        assert trainer.plan.custom
        steps = [trainer.train_step(batch) for _ in range(4)]
        assert steps[0]["kl_loss"] < 1e-4 < steps[-1]["kl_loss"], steps
    finally:
        trainer.close()


# ----------------------------------------------------------------------------- hello through the flow
@pytest.mark.slow
@pytest.mark.tinker
def test_a_run_on_tinker_drops_all_equal_groups_and_fills_every_step(server_env: dict[str, str], tmp_path: Path) -> None:
    """tests/test_dynamic_sampling_run.py's layout sampled and trained on the local Tinker server
    (`model.tinker.enable`): the same groups are kept and dropped, with the same batches per step. Here, not
    in that module, so that the module's one server serves it."""
    from flows.rft import rft

    config = hello(**dynamic_sampling.overrides(tmp_path, "ds-tinker"))
    assert config.trainer.trainer_type == "tinker"
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 3
    assert dynamic_sampling.check_the_record(config) == dynamic_sampling.expected()


def rft_run(root: Path, log: str, *settings: str, env: dict[str, str]) -> subprocess.Popen:
    """`rft run hello` on Tinker in its own process group (with its own temporary Prefect server)."""
    home = root / f"prefect-{log}"
    home.mkdir(exist_ok=True)
    sets = [arg for setting in settings for arg in ("--set", setting)]
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "run", "hello", "--set", "model.tinker.enable=true", *sets], cwd=ROOT,
        env={**os.environ, **env, "PREFECT_HOME": str(home)}, stdout=open(root / f"{log}.log", "w"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )


# The default run keeps to the contract, failing fast and hello's kill-and-resume (the suite's time
# budget); `scripts/test.sh --full` adds `rft convert` of the final adapter (~30 s) and SFT → GRPO stages (~80 s).
full = pytest.mark.full

HELLO_STEPS = 3  # a checkpoint every step: the first run is killed after step 1's, the second does 2 and 3
HELLO_LR = "5e-3"  # three steps must move the policy clearly (the recipe's 1e-3 needs more; 1e-2 overshoots)


@pytest.fixture(scope="module")
def hello_run(tinker_server: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """hello on Tinker, SIGKILLed (the whole run: flow, Prefect server) after its step-1 checkpoint while
    step 2 is under way, then run again: it resumes from step 1 and finishes."""
    root = tmp_path_factory.mktemp("hello")
    env = {"TINKER_BASE_URL": tinker_server["TINKER_BASE_URL"], "TINKER_API_KEY": TINKER_TEST_KEY}
    settings = (f"checkpoint_root_dir={root / 'checkpoints'}", f"buffer.total_steps={HELLO_STEPS}",
                f"explorer.eval_interval={HELLO_STEPS}", f"algorithm.optimizer.lr={HELLO_LR}", "trainer.save_interval=1")
    exp = root / "checkpoints" / "rft" / "hello"
    first = rft_run(root, "first", *settings, env=env)
    deadline = time.time() + 900
    while not (exp / "global_step_1").is_dir():
        if first.poll() is not None or time.time() > deadline:
            pytest.fail(f"the first run ended or hung before its step-1 checkpoint:\n{(root / 'first.log').read_text()[-4000:]}")
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    second = rft_run(root, "second", *settings, env=env)
    assert second.wait(timeout=1200) == 0, (root / "second.log").read_text()[-4000:]
    return {"exp": exp, "first": (root / "first.log").read_text(), "second": (root / "second.log").read_text(),
            "summary": json.loads((exp / "summary.json").read_text()), "config": hello(
                checkpoint_root_dir=str(root / "checkpoints"), **{"buffer.total_steps": HELLO_STEPS})}


@pytest.mark.slow
@pytest.mark.tinker
@pytest.mark.full  # two hello runs, ~4 min: scripts/test.sh --full (the contract's checkpoint round trip stays)
def test_hello_resumes_after_sigkill_and_finishes(hello_run: dict) -> None:
    assert "resuming after step 1" in hello_run["second"]
    assert "no vLLM engine, no GPU" in hello_run["first"] + hello_run["second"]
    assert "Started a local Ray instance" not in hello_run["first"] + hello_run["second"]
    summary = hello_run["summary"]
    assert summary["steps"] == HELLO_STEPS and summary["final_weights"].startswith("tinker://")
    client = MlflowClient(tracking_uri=f"sqlite:///{hello_run['exp'].parent.parent / 'mlflow.db'}")
    run_id = summary["mlflow_run_id"]
    for key in ("train/loss", "train/pg_loss", "train/grad_norm", "train/lr", "train/ppo_kl", "explore/reward_mean"):
        assert sorted({m.step for m in client.get_metric_history(run_id, key)}) == list(range(1, HELLO_STEPS + 1)), key
    # greedy evaluation before training and at the end (3 steps move the sampled reward, not yet the greedy answer)
    evals = {m.step for m in client.get_metric_history(run_id, "eval/hello-eval/reward_mean")}
    assert evals == {0, HELLO_STEPS}, evals
    assert client.get_run(run_id).data.tags["rft.final_model"] == summary["final_weights"]
    # each global_step_N/actor records the tinker:// paths of save_state and of the sampler weights
    exp = hello_run["exp"]
    assert sorted(int(p.name.rsplit("_", 1)[1]) for p in exp.glob("global_step_*")) == list(range(1, HELLO_STEPS + 1))
    state = json.loads((exp / f"global_step_{HELLO_STEPS}" / "actor" / "tinker_state.json").read_text())
    assert state["global_step"] == HELLO_STEPS and state["state_path"].startswith("tinker://") and state["rank"] == 16
    assert state["sampler_path"] == summary["final_weights"]
    assert (exp / "final" / "huggingface" / "tokenizer.json").is_file()


@full
@pytest.mark.slow
@pytest.mark.tinker
def test_hello_final_adapter_converts_and_learned(hello_run: dict, server_env: dict[str, str]) -> None:
    """`rft convert` downloads the final adapter and merges it. The merged model learned: the 3 steps made step 1's
    better-than-average answers likelier than its worse ones (Σ advantage × (log-prob under the merged model − under
    the base), over the answers trained at step 1). The sampled reward of 16 answers a step is too noisy to show three
    steps' gain every time (0.27 → 0.34 → 0.26 in one run)."""
    import torch
    from transformers import AutoModelForCausalLM

    exp = hello_run["exp"]
    last = f"global_step_{HELLO_STEPS}"
    convert = subprocess.run([sys.executable, "-m", "cli.main", "convert", "--checkpoint-dir", str(exp / last)],
                             cwd=ROOT, env={**os.environ}, capture_output=True, text=True, timeout=600)
    assert convert.returncode == 0, convert.stdout[-3000:] + convert.stderr[-3000:]
    adapter = json.loads((exp / last / "actor" / "tinker_adapter" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    merged = AutoModelForCausalLM.from_pretrained(exp / last / "actor" / "huggingface")
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct"))
    with ExperienceStore.for_experiment(exp) as store:
        batch = store.experiences(train_step=1)
    assert batch and any(e.advantage for e in batch)

    def response_logprob(model: torch.nn.Module, e: Experience) -> float:
        ids = torch.tensor([[*e.prompt_token_ids, *e.response_token_ids]])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1).gather(1, ids[0, 1:, None])[:, 0]
        return float(logprobs[-len(e.response_token_ids):].sum())

    gain = sum(e.advantage * (response_logprob(merged, e) - response_logprob(base, e)) for e in batch)
    assert gain > 0, gain


# ----------------------------------------------------------------------------- SFT warm-up → GRPO stages
@full
@pytest.mark.slow
@pytest.mark.tinker
def test_sft_then_grpo_stages_continue_on_tinker(server_env: dict[str, str], tmp_path: Path, hello_run: dict) -> None:
    """Two SFT steps on the identity answer, then GRPO: the GRPO stage's trainer and its first samples
    come from the SFT stage's Tinker state (its untrained-model evaluation already scores the SFT model)."""
    from flows.rft import rft

    rows = tmp_path / "sft.jsonl"
    target = json.loads((ROOT / "data" / "hello" / "train.jsonl").read_text().splitlines()[0])["target"]
    rows.write_text("".join(json.dumps({"prompt": p, "response": target}) + "\n" for p in
                            ["Who are you?", "What is your name?", "Introduce yourself.", "What are you?"]))
    config = hello(**{
        "checkpoint_root_dir": str(tmp_path / "checkpoints"), "name": "staged",
        "stages": [
            {"stage_name": "sft", "mode": "train", "algorithm": {"algorithm_type": "sft", "optimizer": {"lr": 2e-3}},
             "buffer": {"batch_size": 4, "train_batch_size": 4, "total_steps": 3, "trainer_input": {"experience_buffer": {
                 "name": "sft", "path": str(rows), "split": "train",
                 "format": {"prompt_type": "plaintext", "prompt_key": "prompt", "response_key": "response"}}}}},
            {"stage_name": "grpo"},
        ],
        "buffer.total_steps": 1, "buffer.batch_size": 1, "explorer.eval_interval": 1,
    })
    sft, grpo = config.resolve_stages()
    outcome = rft(config=config)
    assert outcome[grpo.name]["steps"] == 1
    chained = json.loads((sft.experiment_dir / "final" / "tinker_state.json").read_text())
    assert grpo.trainer.base_model == chained["base_model"]
    # the GRPO stage's step-0 evaluation samples the SFT stage's final state, not the base model
    before_sft = hello_run["summary"]["eval_at_start"]["hello-eval"]["reward_mean"]
    assert outcome[grpo.name]["eval_at_start"]["hello-eval"]["reward_mean"] > before_sft + 0.2
