"""The veRL trainer (FSDP2 over gloo, two worker processes on CPU) behind the local policy: the whole
backend contract (tests/policy_contract.py: a train step, published weights changing what the vLLM
engine samples, a checkpoint round trip), its checkpoint in veRL's layout
resumed by a fresh trainer (a retried run), and converted to a Hugging Face folder; and its step agrees
with the native torch trainer's on the same batch and weights.

One module-scoped policy (one vLLM engine, one veRL trainer) serves every test: the suite's budget. It holds the
tiny model of tests/tiny_model.py: 361 s for the module against 695 s on SmolLM2-135M (2026-11-30, `full` included).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from backends.policy import Policy, policy_for
from buffer.experience import Experience
from checkpointing.models import resolve_model_path
from deployments import load_recipe
from schemas import ExperimentConfig
from tests import policy_contract
from tests.tiny_model import CONTRACT_LR, CONTRACT_STEPS
from workflows.render import ChatRenderer, renderer_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def verl(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Iterator[tuple[ExperimentConfig, Policy, str]]:
    import ray

    config = load_recipe("smoke").with_overrides({
        "name": "verl-contract",
        # The tiny model (tests/tiny_model.py): the checks here are veRL's arithmetic against the torch trainer's, its
        # checkpoints and its weight push. The contract's lr still lowers the parity batch's loss step by step.
        "model.model_path": tiny_model_path,
        "checkpoint_root_dir": str(tmp_path_factory.mktemp("verl")),
        "cluster.ray_address": "local",
        "trainer.trainer_type": "verl",
        "trainer.cpu_workers": 2,  # two FSDP ranks: sharded weights, gathers, a two-rank checkpoint
        "trainer.gradient_checkpointing": False,
        # weights pushed into the engine as on GPUs (vLLM's weight-transfer API), over gloo here: rank 0
        # sends, rank 1 joins the gathers (the folder route, memory, runs in tests/test_deployment.py)
        "synchronizer.sync_method": "nccl",
        "synchronizer.sync_timeout": 300,  # a push stuck on a peer fails within it (test_a_dead_engine_...)
        "algorithm.optimizer.lr": CONTRACT_LR,
        "algorithm.optimizer.weight_decay": 0.0,
    })
    policy = policy_for(config)
    policy.connect()
    model_dir = str(resolve_model_path(config.model.model_path))
    try:
        policy.check_requirements()
        policy.start_engines(model_dir)
        policy.start_trainer(model_dir, total_steps=100)
        yield config, policy, model_dir
    finally:
        policy.release()
        ray.shutdown()


@pytest.fixture(scope="module")
def renderer() -> ChatRenderer:
    return renderer_for(load_recipe("smoke").model.model_path)


@pytest.fixture(scope="module")
def checkpoint(verl: tuple[ExperimentConfig, Policy, str], renderer: ChatRenderer, module_tmp_path: Path) -> Path:
    """The contract's round trip; its checkpoint is what the later tests resume and convert."""
    step_dir = module_tmp_path / "ckpt" / "global_step_1"
    policy_contract.check_checkpoint_round_trip(verl[1], renderer, step_dir / "actor")
    return step_dir


def parity_batch() -> list[Experience]:
    """Four fixed experiences (two prompts, responses of 3-5 tokens) with nonzero advantages of both signs."""
    out = []
    for i, advantage in enumerate([1.0, -0.5, 0.75, -1.0]):
        prompt = [1, 9690, 198, 2683, 314, 216, 33 + i // 2]
        response = [504 + i, 314, 216, 34 + i, 2][: 3 + i % 3]
        out.append(Experience(
            eid=f"parity-{i}", task_id=f"t{i // 2}", group_id=f"g{i // 2}", prompt_token_ids=prompt,
            response_token_ids=response, logprobs=[0.0] * len(response), reward=advantage, advantage=advantage,
        ))
    return out


# First among the tests that train: it needs the module's veRL trainer at the base weights (checked below).
def test_verl_and_torch_trainers_agree_on_a_fixed_batch(verl) -> None:
    """The same batch, the same starting weights and algorithm settings: veRL's step and the native torch
    trainer's give the same loss and gradient norm; then a few more veRL steps on it lower the loss."""
    from backends.torch_trainer import TorchTrainer

    config, policy, model_dir = verl
    trainer = policy.trainer
    assert trainer.global_step == 0, "this test needs the veRL trainer at the base weights: keep it first"
    torch_config = config.with_overrides({"trainer.trainer_type": "torch", "trainer.num_threads": 2})
    assert torch_config.algorithm == config.algorithm and torch_config.trainer.grad_clip == config.trainer.grad_clip
    reference = TorchTrainer(torch_config, Path(model_dir), total_steps=100)
    batch = parity_batch()
    for exp, logprobs in zip(batch, reference.logprobs(batch), strict=True):
        exp.logprobs = logprobs  # on-policy: ratio 1 at the first step, so no token starts out clipped

    ours, theirs = reference.train_step(batch), trainer.train_step(batch)
    # Tolerances: both run the same veRL loss function in float32 with the same whole-batch token
    # normalisation, so the loss agrees to ~1e-6 (float32 rounding of differently ordered sums: two
    # FSDP ranks and jagged packing there, padded micro-batches here). veRL's forward pass itself is
    # ~1e-4 relative off plain transformers at fp32 (notes/verl.md §5: logprobs |Δ| ≤ 2.5e-5, cause not
    # pinned down), which the gradient norm over SmolLM2-135M's parameters showed as a ~1e-4 relative gap; 1e-3 leaves
    # room for that and still catches a real difference (a wrong micro-batch or loss normalisation moves both by far more).
    print(f"parity: loss torch {ours['loss']:.8f} veRL {theirs['loss']:.8f}; "
          f"grad_norm torch {ours['grad_norm']:.6f} veRL {theirs['grad_norm']:.6f}")
    assert theirs["loss"] == pytest.approx(ours["loss"], abs=1e-5), (ours, theirs)
    assert theirs["pg_loss"] == pytest.approx(ours["pg_loss"], abs=1e-5), (ours, theirs)
    assert theirs["grad_norm"] == pytest.approx(ours["grad_norm"], rel=1e-3), (ours, theirs)
    del reference

    losses = [theirs["loss"]] + [trainer.train_step(batch)["loss"] for _ in range(3)]
    print(f"parity: veRL losses over 4 steps {losses}")
    assert losses[-1] < losses[0] and all(map(math.isfinite, losses)), losses


def test_contract_train_step_changes_logprobs(verl, renderer: ChatRenderer) -> None:
    policy_contract.check_train_step_changes_logprobs(verl[1], renderer)


def test_contract_checkpoint_round_trip_in_verl_layout(checkpoint: Path) -> None:
    actor = checkpoint / "actor"
    names = {p.name for p in actor.iterdir()}
    for rank in (0, 1):
        assert {f"model_world_size_2_rank_{rank}.pt", f"optim_world_size_2_rank_{rank}.pt"} <= names
    assert json.loads((actor / "fsdp_config.json").read_text())["world_size"] == 2
    assert not (actor / "huggingface" / "model.safetensors").exists()  # convert's job, not the trainer's


def test_contract_published_weights_change_samples(verl, renderer: ChatRenderer) -> None:
    """Both ranks gather the sharded weights, rank 0 publishes them, the vLLM engine loads them: trained
    toward a target answer, the engine answers it greedily and serves the trainer's step as its version."""
    policy_contract.check_published_weights_change_samples(verl[1], renderer, max_steps=CONTRACT_STEPS)


def test_a_fresh_trainer_resumes_from_the_checkpoint(verl, renderer: ChatRenderer, checkpoint: Path) -> None:
    """A retried run starts new workers and loads the step: the same weights and step count."""
    _, policy, model_dir = verl
    exp = policy_contract.target_experience(renderer, eid="resume")
    policy.trainer.load_checkpoint(checkpoint / "actor")
    step, saved = policy.trainer.global_step, policy.trainer.logprobs([exp])[0]
    policy.release(engines=False)  # the trainer actor and its veRL workers (and placement group) are gone
    policy.start_trainer(model_dir, total_steps=100)
    policy.trainer.load_checkpoint(checkpoint / "actor")
    assert policy.trainer.global_step == step
    assert policy_contract._close(policy.trainer.logprobs([exp])[0], saved)


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_a_dead_verl_worker_counts_as_a_dead_trainer_and_is_started_again(verl, renderer: ChatRenderer, checkpoint: Path) -> None:
    """One FSDP rank killed as the OOM killer would (SIGKILL): the trainer actor still answers, but the
    policy's self-healing sees the trainer as dead, starts it with new workers, and the checkpoint
    restores the same weights. (Before, the trainer counted as alive and the run failed: seen on CI.)"""
    import os
    import signal

    _, policy, model_dir = verl
    exp = policy_contract.target_experience(renderer, eid="dead-rank")
    policy.trainer.load_checkpoint(checkpoint / "actor")
    saved = policy.trainer.logprobs([exp])[0]
    assert not policy.revive_trainer(model_dir, total_steps=100)  # all alive: nothing to do
    ranks = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).startswith("ray::VerlWorker")]
    assert len(ranks) == 2, ranks  # Ray titles an actor's process by its class
    os.kill(ranks[0], signal.SIGKILL)
    assert policy.revive_trainer(model_dir, total_steps=100)
    policy.trainer.load_checkpoint(checkpoint / "actor")
    assert policy_contract._close(policy.trainer.logprobs([exp])[0], saved)


def test_the_checkpoint_converts_to_a_model_transformers_loads(verl, checkpoint: Path, tmp_path: Path) -> None:
    import shutil

    from transformers import AutoModelForCausalLM

    from checkpointing.merge import convert_step, copy_side_files

    step = tmp_path / "global_step_1"
    shutil.copytree(checkpoint, step)
    model_dir = Path(verl[2])  # the module's model
    copy_side_files(model_dir, step / "actor" / "huggingface")  # as the save-checkpoint task does
    result = convert_step(step, None, False, "2GB")
    assert result["format"] == "verl-fsdp" and result["max_logit_diff"] <= result["tolerance"], result
    AutoModelForCausalLM.from_pretrained(result["model_dir"])


def test_sft_trains_on_verl(verl) -> None:
    """algorithm_type sft on veRL runs its sft loss (backends/verl/losses.py: the token mean of the
    response's negative log-likelihood): the first step's loss is the torch trainer's sft loss on the same
    batch and weights, and a few steps on the batch lower it."""
    from backends.torch_trainer import TorchTrainer
    from backends.trainer import TrainerDevices
    from backends.verl.trainer import VerlTrainer

    config, _, model_dir = verl
    sft = config.with_overrides({
        "mode": "train", "algorithm.algorithm_type": "sft", "trainer.cpu_workers": 1, "buffer.train_batch_size": 4,
        "buffer.trainer_input.experience_buffer": {"path": "data/gsm8k", "format": {
            "prompt_type": "plaintext", "prompt_key": "question", "response_key": "answer"}},
    })
    assert sft.algorithm.policy_loss_fn == "sft" and sft.trainer.trainer_type == "verl"
    # as tasks/sft.py makes SFT rows: no advantage, no rollout logprobs
    batch = [replace(e, advantage=0.0, logprobs=[0.0] * len(e.response_token_ids)) for e in parity_batch()]
    reference = TorchTrainer(sft.with_overrides({"trainer.trainer_type": "torch", "trainer.num_threads": 2}),
                             Path(model_dir), total_steps=10)
    expected = reference.train_step(batch)["loss"]
    del reference
    trainer = VerlTrainer(sft, Path(model_dir), total_steps=10, devices=TrainerDevices(threads=2))
    try:
        losses = [trainer.train_step(batch)["loss"] for _ in range(4)]
    finally:
        trainer.close()
    print(f"sft on veRL: losses {losses}; torch trainer's first {expected:.6f}")
    assert losses[0] == pytest.approx(expected, rel=1e-4), (losses, expected)
    assert losses[-1] < losses[0] and all(map(math.isfinite, losses)), losses


@pytest.mark.full  # CI's 90 minutes: scripts/test.sh --full (docs/testing.md, 2026-11-29)
@pytest.mark.parametrize("preset", ["topr", "asymre"])
def test_our_losses_run_inside_verls_ppo_loss(verl, preset: str) -> None:
    """A loss veRL does not have (topr; asymre's opmd) runs as the loss mode of veRL's ppo_loss
    (backends/verl/losses.py): its first step's loss is the torch trainer's on the same batch and weights."""
    from backends.torch_trainer import TorchTrainer
    from backends.trainer import TrainerDevices
    from backends.verl.trainer import VerlTrainer

    config, _, model_dir = verl
    ours = config.with_overrides({"algorithm": {"algorithm_type": preset, "kl_loss_fn": "none"}, "trainer.cpu_workers": 1})
    assert ours.algorithm.policy_loss_fn in ("topr", "opmd") and ours.trainer.trainer_type == "verl"
    batch = parity_batch()
    reference = TorchTrainer(ours.with_overrides({"trainer.trainer_type": "torch", "trainer.num_threads": 2}),
                             Path(model_dir), total_steps=10)
    for exp, logprobs in zip(batch, reference.logprobs(batch), strict=True):
        exp.logprobs = logprobs
    expected = reference.train_step(batch)
    del reference
    trainer = VerlTrainer(ours, Path(model_dir), total_steps=10, devices=TrainerDevices(threads=2))
    try:
        first = trainer.train_step(batch)
    finally:
        trainer.close()
    print(f"{preset} on veRL: loss {first['loss']:.6f}, torch trainer's {expected['loss']:.6f}")
    # veRL's forward pass is ~1e-4 relative off plain transformers at fp32 (the parity test above); topr's
    # ratio-dependent weights carry that into the loss (3e-4 relative measured), so 1e-3 relative, as for grad_norm
    assert first["loss"] == pytest.approx(expected["loss"], rel=1e-3), (first, expected)
    assert first["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-3), (first, expected)


def test_kl_penalty_on_verl_matches_the_torch_trainer(verl, tmp_path: Path) -> None:
    """algorithm.kl_penalty_fn on veRL (its own reference engine, no KL loss): the same batch and weights
    give the torch trainer's KL, penalised rewards and adaptive coefficient, and the coefficient is saved in
    veRL's state file. A one-rank trainer of its own beside the module's (no engine needed)."""
    from backends.torch_trainer import TorchTrainer
    from backends.trainer import TrainerDevices
    from backends.verl.trainer import STATE_FILE, VerlTrainer

    config, _, model_dir = verl
    config = config.with_overrides({
        "trainer.cpu_workers": 1,
        "algorithm.kl_loss_fn": "none", "algorithm.kl_loss_fn_args": {"kl_coef": 0.0},
        "algorithm.kl_penalty_fn": "k2",
        "algorithm.kl_penalty_fn_args": {"kl_coef": 0.05, "adaptive": True, "target_kl": 0.01, "horizon": 10},
    })
    batch = parity_batch()  # rollout logprobs 0: far from the reference's, a large KL
    torch_side = TorchTrainer(config.with_overrides({"trainer.trainer_type": "torch", "trainer.num_threads": 2}),
                              Path(model_dir), total_steps=10)
    ours = torch_side.train_step(batch)
    del torch_side
    trainer = VerlTrainer(config, Path(model_dir), total_steps=10, devices=TrainerDevices(threads=2))
    try:
        assert trainer.configs.ref is not None and not trainer.configs.use_kl_loss
        theirs = trainer.train_step(batch)
        trainer.save_checkpoint(tmp_path / "ckpt")
        state = json.loads((tmp_path / "ckpt" / STATE_FILE).read_text())
    finally:
        trainer.close()
    print(f"kl penalty: torch {ours['kl_penalty']:.6f} veRL {theirs['kl_penalty']:.6f}; rewards after "
          f"{ours['reward_after_kl']:.6f} / {theirs['reward_after_kl']:.6f}")
    assert ours["kl_penalty"] > 1.0  # k2 of logprob 0 against the reference's: far from 0
    for key in ("kl_penalty", "reward_after_kl"):  # forward passes ~1e-4 apart (see the parity test above)
        assert theirs[key] == pytest.approx(ours[key], rel=1e-3), (key, ours, theirs)
    assert theirs["kl_penalty_coef"] == ours["kl_penalty_coef"] == 0.05
    assert state["reward_kl"]["kl_coef"] == pytest.approx(0.05 * (1 + 0.2 * 4 / 10))  # KL ≫ target: +20 % × 4/10


def test_ppo_with_a_critic_on_verl_matches_the_torch_trainer(verl, tmp_path: Path) -> None:
    """advantage_fn 'ppo' (GAE) on veRL: a value-model engine beside the actor in the worker. From the same policy
    and value-head weights, veRL's steps give the torch trainer's critic metrics, policy loss (on GAE's per-token
    advantages) and gradient norm; critic_warmup 1 holds the policy in the first step; the critic is checkpointed
    beside the actor, and loading the checkpoint restores it (the next step gives the same numbers again)."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from backends.critic import critic_dir
    from backends.torch_trainer import TorchTrainer
    from backends.trainer import TrainerDevices
    from backends.verl.trainer import VerlTrainer

    base, _, model_dir = verl
    critic_model = tmp_path / "critic-model"  # one value head for both (each trainer would draw its own)
    torch.manual_seed(0)
    AutoModelForTokenClassification.from_pretrained(model_dir, num_labels=1).save_pretrained(critic_model)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(critic_model)
    config = base.with_overrides({
        "trainer.cpu_workers": 1, "algorithm.algorithm_type": "ppo", "model.critic_model_path": str(critic_model),
        "trainer.critic.optim.lr": 1e-4, "trainer.critic.critic_warmup": 1,
    })
    assert config.algorithm.advantage_fn == "ppo" and not config.warnings, config.warnings
    steps = [[replace(e, eid=f"{step}/{e.eid}", advantage=None, reward=e.reward + step) for e in parity_batch()]
             for step in range(3)]
    torch_side = TorchTrainer(config.with_overrides({"trainer.trainer_type": "torch", "trainer.num_threads": 2}),
                              Path(model_dir), total_steps=10)
    for batch in steps:  # on-policy: ratio 1 at each step's start
        for exp, logprobs in zip(batch, torch_side.logprobs(batch), strict=True):
            exp.logprobs = logprobs
    ours = [torch_side.train_step(batch) for batch in steps[:2]]
    del torch_side

    trainer = VerlTrainer(config, Path(model_dir), total_steps=10, devices=TrainerDevices(threads=2))
    try:
        assert trainer.critic is not None and trainer.configs.critic.model_type == "value_model"
        start = trainer.logprobs(steps[0])
        theirs = [trainer.train_step(steps[0])]
        assert trainer.logprobs(steps[0]) == start  # critic_warmup: the policy waited
        theirs.append(trainer.train_step(steps[1]))
        actor = tmp_path / "ckpt" / "global_step_2" / "actor"
        trainer.save_checkpoint(actor)
        after = trainer.train_step(steps[2])
        trainer.load_checkpoint(actor)
        again = trainer.train_step(steps[2])
    finally:
        trainer.close()
    print(f"critic parity: torch {ours}\nveRL {theirs}")
    assert theirs[0]["critic/warmup"] == ours[0]["critic/warmup"] == 1.0 and "critic/warmup" not in theirs[1]
    critic_keys = ("critic/value_loss", "critic/values_mean", "critic/returns_mean", "critic/vf_explained_var",
                   "critic/grad_norm")
    for ours_step, theirs_step in zip(ours, theirs, strict=True):
        for key in critic_keys:  # forward passes ~1e-4 apart (see the parity test above)
            assert theirs_step[key] == pytest.approx(ours_step[key], rel=1e-3, abs=1e-5), (key, ours_step, theirs_step)
    assert theirs[1]["pg_loss"] == pytest.approx(ours[1]["pg_loss"], abs=1e-5), (ours[1], theirs[1])
    assert theirs[1]["grad_norm"] == pytest.approx(ours[1]["grad_norm"], rel=1e-3), (ours[1], theirs[1])
    assert ours[1]["critic/values_mean"] != ours[0]["critic/values_mean"]  # the critic learned in between
    assert any(critic_dir(actor).iterdir())
    for key in (*critic_keys, "pg_loss", "grad_norm"):
        assert again[key] == pytest.approx(after[key], rel=1e-6, abs=1e-7), (key, after, again)


def test_dpo_on_verl_matches_the_torch_trainer(verl, tmp_path: Path) -> None:
    """A preference loss on veRL (ours, inside its engine; its reference engine scores the pairs): two ranks, each
    given one whole (chosen, rejected) pair, take the torch trainer's steps on the same pairs: the same DPO loss,
    implicit rewards, margin, the preset's KL term and gradient norm, step after step."""
    from backends.torch_trainer import TorchTrainer
    from backends.trainer import TrainerDevices
    from backends.verl.trainer import VerlTrainer
    from tests.test_dpo import SYSTEM, _pairs, dpo_config, write_pairs

    _, _, model_dir = verl
    path = write_pairs(tmp_path / "pairs.jsonl")
    config = dpo_config(path, **{"cluster.ray_address": "local", "trainer.trainer_type": "verl", "trainer.cpu_workers": 2,
                                 "trainer.use_dynamic_bsz": False, "trainer.micro_batch_size": 2,
                                 "trainer.gradient_checkpointing": False, "algorithm.optimizer.lr": 1e-5})
    pairs = _pairs({"path": str(path), "format": {"prompt_type": "plaintext", "system_prompt": SYSTEM}})
    batch = [e for pair in pairs[:2] for e in pair]
    torch_side = TorchTrainer(config.with_overrides({"trainer.trainer_type": "torch", "trainer.num_threads": 2}),
                              Path(model_dir), total_steps=3)
    ours = [torch_side.train_step(batch) for _ in range(2)]
    del torch_side
    trainer = VerlTrainer(config, Path(model_dir), total_steps=3, devices=TrainerDevices(threads=2))
    try:
        assert trainer.configs.ref is not None and trainer.dp_size == 2
        theirs = [trainer.train_step(batch) for _ in range(2)]
    finally:
        trainer.close()
    print(f"dpo parity: torch {ours}\nveRL {theirs}")
    assert theirs[1]["reward_margin"] > theirs[0]["reward_margin"]  # it learns: the chosen side moves up
    for ours_step, theirs_step in zip(ours, theirs, strict=True):
        for key in ("dpo_loss", "pg_loss", "chosen_reward", "rejected_reward", "reward_margin", "kl_loss", "entropy",
                    "grad_norm"):
            assert theirs_step[key] == pytest.approx(ours_step[key], rel=1e-3, abs=1e-5), (key, ours_step, theirs_step)
        assert theirs_step["reward_accuracy"] == ours_step["reward_accuracy"]


def test_a_mix_loss_on_verl_matches_the_torch_trainer(verl, tmp_path: Path) -> None:
    """The mix family on veRL (ours whole inside its engine): two sampled rows and two expert rows, split over two
    ranks (one holds only expert rows), give the torch trainer's loss, its PPO and SFT parts and gradient norm."""
    import torch

    from backends.torch_trainer import TorchTrainer
    from backends.trainer import TrainerDevices
    from backends.verl.trainer import VerlTrainer
    from tests.test_mix import _config

    _, _, model_dir = verl
    config = _config(tmp_path, **{"cluster.ray_address": "local", "trainer.trainer_type": "verl", "trainer.cpu_workers": 2,
                                  "trainer.gradient_checkpointing": False, "algorithm.optimizer.lr": 1e-4,
                                  "algorithm.policy_loss_fn_args": {"mu": 0.5}})
    batch = [replace(e, expert=i >= 2, advantage=0.0 if i >= 2 else e.advantage) for i, e in enumerate(parity_batch())]
    torch_side = TorchTrainer(config.with_overrides({"trainer.trainer_type": "torch", "trainer.num_threads": 2}),
                              Path(model_dir), total_steps=3)
    for exp, logprobs in zip(batch, torch_side.logprobs(batch), strict=True):
        exp.logprobs = logprobs
    ours = [torch_side.train_step(batch) for _ in range(2)]
    del torch_side
    trainer = VerlTrainer(config, Path(model_dir), total_steps=3, devices=TrainerDevices(threads=2))
    try:
        assert trainer.expert_rows and trainer.dp_size == 2
        theirs = [trainer.train_step(batch) for _ in range(2)]
    finally:
        trainer.close()
    print(f"mix parity: torch {ours}\nveRL {theirs}")
    for ours_step, theirs_step in zip(ours, theirs, strict=True):
        for key in ("pg_loss", "loss", "mu", "expert/sft_loss", "grad_norm"):
            if key in ours_step:
                assert theirs_step[key] == pytest.approx(ours_step[key], rel=1e-3, abs=1e-5), (key, ours_step, theirs_step)
    assert torch.isfinite(torch.tensor(theirs[1]["loss"])) and theirs[1]["pg_loss"] != theirs[0]["pg_loss"]


# Last: it kills the module's engine.
def test_a_dead_engine_is_named_and_every_rank_stops_before_its_gathers(verl, renderer: ChatRenderer) -> None:
    """A push toward a dead engine fails at once naming it, on every rank: none is left waiting in a
    gather (until sync_timeout) for a sender that gave up, and the trainer trains on afterwards."""
    import time

    import ray

    _, policy, _ = verl
    (engine,) = policy.engines()
    ray.kill(engine.actor, no_restart=True)
    deadline = time.monotonic() + 60
    while engine.alive(timeout_s=5) and time.monotonic() < deadline:
        time.sleep(0.5)
    version = policy.trainer.global_step
    with pytest.raises((LookupError, RuntimeError), match=engine.name):
        policy.sync(version)  # the policy names it before the trainer opens a group
    transport = policy._transport()
    started = time.monotonic()
    with pytest.raises(Exception, match="do not answer"):  # both ranks check before any collective
        policy.trainer.push_weights(transport, [engine.actor], version)
    print(f"dead engine: both ranks stopped in {time.monotonic() - started:.1f} s")
    exp = policy_contract.on_policy(policy, policy_contract.target_experience(renderer, eid="after-dead"))
    assert math.isfinite(policy.trainer.train_step([exp])["loss"])  # the FSDP group is whole
