"""Our schema → veRL 0.9.1's config tree → the engine workers' configs, field by field (no workers start)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from backends.verl.config import verl_overrides, verl_tree, worker_configs
from checkpointing.models import resolve_model_path
from deployments import load_recipe
from schemas import ExperimentConfig


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")


def verl_config(**overrides: object) -> ExperimentConfig:
    return load_recipe("smoke").with_overrides({"trainer.trainer_type": "verl", **overrides})


def test_every_setting_lands_in_the_actor_subtree(model_dir: Path) -> None:
    config = verl_config(**{
        "trainer.micro_batch_size": 3,
        "trainer.use_dynamic_bsz": False,
        "trainer.max_token_len_per_gpu": 1234,
        "trainer.grad_clip": 0.7,
        "trainer.strategy": "fsdp2",
        "trainer.model_dtype": "float32",
        "trainer.param_dtype": "bfloat16",
        "trainer.gradient_checkpointing": False,
        "trainer.use_remove_padding": False,
        "trainer.attn_implementation": "eager",
        "trainer.use_torch_compile": True,
        "trainer.fsdp_size": 2,
        "trainer.param_offload": True,
        "trainer.optimizer_offload": True,
        "trainer.seed": 7,
        "algorithm.optimizer": {"lr": 3e-5, "betas": [0.8, 0.9], "eps": 1e-6, "weight_decay": 0.05,
                                "lr_warmup_steps": 3, "lr_warmup_steps_ratio": 0.1, "min_lr_ratio": 0.2,
                                "lr_scheduler_type": "cosine"},
        "algorithm.policy_loss_fn_args": {"clip_range": 0.2, "clip_range_high": 0.28, "clip_ratio_c": 4.0,
                                          "loss_agg_mode": "seq-mean-token-mean"},
        "algorithm.kl_loss_fn": "low_var_kl",
        "algorithm.kl_loss_fn_args": {"kl_coef": 0.05},
        "algorithm.entropy_loss_fn": "default",
        "algorithm.entropy_loss_fn_args": {"entropy_coef": 0.01},
        "buffer.explorer_input.taskset.rollout_args.temperature": 0.7,
        "model.custom_chat_template": "{{ messages }}",
    })
    a = verl_overrides(config, model_dir, total_steps=17, use_gpu=False)["actor_rollout_ref"]
    model, actor, ref, rollout = a["model"], a["actor"], a["ref"], a["rollout"]
    assert model["path"] == str(model_dir)
    assert model["custom_chat_template"] == "{{ messages }}"
    assert model["use_remove_padding"] is False
    assert model["enable_gradient_checkpointing"] is False
    # the model's own special token ids (veRL would take the tokenizer's: eos/pad 1 for this one, not 2)
    assert model["override_config"] == {"attn_implementation": "eager", "bos_token_id": 1, "eos_token_id": 2,
                                        "pad_token_id": 2}
    assert model["lora_rank"] == 0
    assert actor["strategy"] == "fsdp2"
    assert actor["ppo_mini_batch_size"] == config.buffer.train_batch_size
    assert actor["ppo_micro_batch_size_per_gpu"] == 3
    assert actor["use_dynamic_bsz"] is False
    assert actor["ppo_max_token_len_per_gpu"] == 1234
    assert actor["grad_clip"] == 0.7 and actor["optim"]["clip_grad"] == 0.7  # the engine reads optim.clip_grad
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"], actor["clip_ratio_c"]) == (0.2, 0.28, 4.0)
    assert actor["loss_agg_mode"] == "seq-mean-token-mean"
    assert actor["policy_loss"] == {"loss_mode": "vanilla"}
    assert (actor["use_kl_loss"], actor["kl_loss_type"], actor["kl_loss_coef"]) == (True, "low_var_kl", 0.05)
    assert actor["entropy_coeff"] == 0.01
    assert actor["ppo_epochs"] == 1 and actor["shuffle"] is False
    assert actor["use_torch_compile"] is True
    assert actor["ulysses_sequence_parallel_size"] == 1
    optim = actor["optim"]
    assert (optim["optimizer"], optim["optimizer_impl"]) == ("AdamW", "torch.optim")
    assert (optim["lr"], optim["betas"], optim["weight_decay"]) == (3e-5, [0.8, 0.9], 0.05)
    assert optim["override_optimizer_config"] == {"eps": 1e-6}
    assert (optim["lr_warmup_steps"], optim["lr_warmup_steps_ratio"]) == (3, 0.1)
    assert (optim["lr_scheduler_type"], optim["min_lr_ratio"], optim["total_training_steps"]) == ("cosine", 0.2, 17)
    fsdp = actor["fsdp_config"]
    assert fsdp["strategy"] == "fsdp2" and fsdp["model_dtype"] == "fp32"
    assert fsdp["mixed_precision"] == {"param_dtype": "bf16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    assert (fsdp["fsdp_size"], fsdp["param_offload"], fsdp["optimizer_offload"]) == (2, True, True)
    assert (fsdp["use_torch_compile"], fsdp["seed"], fsdp["ulysses_sequence_parallel_size"]) == (True, 7, 1)
    assert actor["checkpoint"]["save_contents"] == ["model", "optimizer", "extra"]  # no hf_model
    assert ref["fsdp_config"]["forward_only"] is True and ref["fsdp_config"]["param_offload"] is False
    for section in (ref, rollout):
        assert section["log_prob_micro_batch_size_per_gpu"] == 3
        assert section["log_prob_use_dynamic_bsz"] is False
        assert section["log_prob_max_token_len_per_gpu"] == 1234
    assert rollout["temperature"] == 0.7 and rollout["n"] == config.algorithm.repeat_times


def test_device_dependent_defaults(model_dir: Path) -> None:
    config = verl_config()
    cpu = verl_overrides(config, model_dir, 4, use_gpu=False)["actor_rollout_ref"]
    gpu = verl_overrides(config, model_dir, 4, use_gpu=True)["actor_rollout_ref"]
    assert cpu["actor"]["fsdp_config"]["mixed_precision"]["param_dtype"] == "fp32"
    assert gpu["actor"]["fsdp_config"]["mixed_precision"]["param_dtype"] == "bf16"  # veRL's default on GPUs
    assert cpu["model"]["override_config"]["attn_implementation"] == "sdpa"
    assert (cpu["actor"]["use_torch_compile"], gpu["actor"]["use_torch_compile"]) == (False, True)
    # token budget: 2 × the context length unless set
    assert cpu["actor"]["ppo_max_token_len_per_gpu"] == 2 * config.model.max_model_len
    # a KL term with a zero coefficient needs no reference model
    off = verl_config(**{"algorithm.kl_loss_fn": "k2", "algorithm.kl_loss_fn_args": {"kl_coef": 0.0}})
    assert verl_overrides(off, model_dir, 4, use_gpu=False)["actor_rollout_ref"]["actor"]["use_kl_loss"] is False


def test_lora_settings(model_dir: Path) -> None:
    config = verl_config(**{"model.lora_configs": [
        {"lora_rank": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "path": "/adapters/a"}]})
    model = verl_overrides(config, model_dir, 4, use_gpu=False)["actor_rollout_ref"]["model"]
    assert (model["lora_rank"], model["lora_alpha"], model["target_modules"]) == (8, 16, ["q_proj", "v_proj"])
    assert model["lora_adapter_path"] == "/adapters/a" and model["lora"] == {"merge": True}


def test_the_tree_becomes_the_engine_configs_and_trainer_config_wins(model_dir: Path) -> None:
    config = verl_config(**{
        "trainer.micro_batch_size": 2,
        "trainer.use_dynamic_bsz": False,
        "algorithm.kl_loss_fn": "k3",
        "algorithm.kl_loss_fn_args": {"kl_coef": 0.01},
        "algorithm.optimizer.lr": 2e-5,
        # Trinity's raw veRL tree is merged last
        "trainer.trainer_config": {"actor_rollout_ref": {"actor": {"fsdp_config": {"reshard_after_forward": False},
                                                                   "optim": {"weight_decay": 0.123}}}},
    })
    tree = verl_tree(config, model_dir, total_steps=9, use_gpu=False)
    assert tree.actor_rollout_ref.actor.optim.weight_decay == 0.123
    configs = worker_configs(tree)
    engine = configs.actor.engine_config
    assert (engine.strategy, engine.model_dtype, engine.forward_only) == ("fsdp2", "fp32", False)
    assert engine.mixed_precision["param_dtype"] == "fp32"
    assert (engine.use_dynamic_bsz, engine.micro_batch_size_per_gpu, engine.infer_micro_batch_size_per_gpu) == (False, 2, 2)
    assert engine.reshard_after_forward is False
    assert engine.use_remove_padding is True and engine.use_torch_compile is False
    optim = configs.actor.optimizer_config
    assert (optim.lr, optim.weight_decay, optim.clip_grad, optim.total_training_steps) == (2e-5, 0.123, 1.0, 9)
    assert configs.actor.model_config.override_config["attn_implementation"] == "sdpa"
    hf_config = configs.actor.model_config.hf_config
    assert (hf_config.pad_token_id, hf_config.eos_token_id) == (2, 2)  # as the model's config.json says
    loss_config = configs.loss_fn.keywords["config"]  # functools.partial(ppo_loss, config=ActorConfig)
    assert (loss_config.use_kl_loss, loss_config.kl_loss_type, loss_config.kl_loss_coef) == (True, "k3", 0.01)
    assert configs.use_kl_loss and not configs.is_lora
    ref = configs.ref.engine_config  # a forward-only engine for the KL term
    assert (ref.forward_only, ref.infer_micro_batch_size_per_gpu, ref.use_dynamic_bsz) == (True, 2, False)


def test_settings_the_verl_trainer_cannot_train_are_refused() -> None:
    with pytest.raises(ValidationError, match="algorithm.policy_loss_fn_args.enable_sequence_masking"):
        verl_config(**{"algorithm.policy_loss_fn_args": {"enable_sequence_masking": True}})
    verl_config(**{"algorithm.policy_loss_fn": "opmd"})  # ours, as the loss mode of veRL's ppo_loss (backends/verl/losses.py)
    with pytest.raises(ValidationError, match="corrected_k3"):
        verl_config(**{"algorithm.kl_loss_fn": "corrected_k3", "algorithm.kl_loss_fn_args": {"kl_coef": 0.1}})
    with pytest.raises(ValidationError, match="use_remove_padding"):
        verl_config(**{"trainer.ulysses_sequence_parallel_size": 2, "trainer.use_remove_padding": False})
    with pytest.raises(ValidationError, match="trainer.strategy"):
        verl_config(**{"trainer.strategy": "fsdp"})  # the smoke recipe says cluster.gpu_per_node 0


@pytest.mark.parametrize("recipe", ["gsm8k-qwen", "gsm8k-verl-lora"])
def test_gpu_recipes_map_onto_verl(recipe: str, model_dir: Path) -> None:
    """The GPU recipes validate against what this backend supports and map without error."""
    config = load_recipe(recipe)
    assert config.trainer.trainer_type == "verl"
    tree = verl_overrides(config, model_dir, total_steps=10, use_gpu=True)["actor_rollout_ref"]
    assert tree["actor"]["fsdp_config"]["mixed_precision"]["param_dtype"] == "bf16"
    if recipe == "gsm8k-verl-lora":
        assert tree["model"]["lora_rank"] == 32 and tree["model"]["target_modules"] == "all-linear"
    else:
        assert tree["model"]["lora_rank"] == 0


def test_verl_actor_overrides_mirror_our_settings() -> None:
    from backends.verl.config import actor_overrides
    from schemas import AlgorithmConfig

    algo = AlgorithmConfig(algorithm_type="grpo", policy_loss_fn="ppo",
                           policy_loss_fn_args={"clip_range": 0.2, "clip_range_high": 0.28},
                           kl_loss_fn="low_var_kl", kl_loss_fn_args={"kl_coef": 0.01},
                           entropy_loss_fn="default", entropy_loss_fn_args={"entropy_coef": 0.001})
    assert actor_overrides(algo) == {
        "policy_loss": {"loss_mode": "vanilla"},
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.28,
        "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean",
        "use_kl_loss": True,
        "kl_loss_type": "low_var_kl",
        "kl_loss_coef": 0.01,
        "entropy_coeff": 0.001,
    }


def test_a_kl_penalty_alone_builds_the_reference_engine_from_ref_model_path(model_dir: Path, tmp_path: Path) -> None:
    """kl_penalty_fn needs the reference's log-probs (backends/verl/trainer.py asks for them) with no KL loss;
    model.ref_model_path loads another model as the reference."""
    import shutil

    other = tmp_path / "reference"
    shutil.copytree(model_dir, other, ignore=shutil.ignore_patterns("*.safetensors"))
    config = verl_config(**{"algorithm.kl_loss_fn": "none", "algorithm.kl_loss_fn_args": {"kl_coef": 0.0},
                            "algorithm.kl_penalty_fn": "low_var_kl", "algorithm.kl_penalty_fn_args": {"kl_coef": 0.01},
                            "model.ref_model_path": str(other)})
    tree = verl_tree(config, model_dir, total_steps=4, use_gpu=False)
    assert worker_configs(tree).ref is None  # no KL loss and no reference asked for
    configs = worker_configs(tree, reference=True, ref_model_path=str(other))
    assert not configs.use_kl_loss and configs.ref is not None
    assert configs.ref.model_config.path == str(other) and configs.actor.model_config.path == str(model_dir)
    with pytest.raises(ValidationError, match="model.ref_model_path"):
        verl_config(**{"model.ref_model_path": str(other), "model.lora_configs": [{"lora_rank": 8}]})


def test_our_losses_map_to_their_loss_mode_on_verl() -> None:
    """Each loss veRL runs through backends/verl/losses.py maps onto its loss mode, with or without clip ranges."""
    from backends.verl.config import actor_overrides
    from backends.verl.losses import loss_mode
    from schemas.trainer import VerlTrainerConfig

    adapted = [name for name in VerlTrainerConfig.policy_losses() if VerlTrainerConfig.adapted(name)]
    assert {"opmd", "topr", "sapo", "sppo", "rec", "importance_sampling", "sft_is", "sft_phi"} <= set(adapted)
    for name in adapted:
        config = verl_config(**{"algorithm.policy_loss_fn": name})
        assert actor_overrides(config.algorithm)["policy_loss"] == {"loss_mode": loss_mode(name)}, name
