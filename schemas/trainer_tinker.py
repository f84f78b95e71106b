"""Tinker's trainer settings: a LoRA trained on a Tinker service (hosted, or the self-hosted skyrl server), its
built-in losses or ours through forward_backward_custom, its rules (schemas/trainer_base.py says what every trainer's
class declares)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from algorithms import has_kl_term
from algorithms.registry import Need, is_off
from schemas.base import ALIAS, Entry, honoured, set_unmarked, warned
from schemas.resolver import Resolver
from schemas.rewards import RewardArgsError, step_arg
from schemas.stage_kind import stage_kind

if TYPE_CHECKING:
    from schemas.explorer import InferenceBase
    from schemas.sections import Sections

from schemas.trainer_base import TrainerBase


class TinkerTrainerConfig(TrainerBase):
    """Training on the Tinker service: a LoRA of `base_model`, trained and sampled remotely."""

    # Policy losses Tinker computes with a built-in loss of its own (the others run ours through
    # forward_backward_custom: every policy loss algorithms/ implements runs on Tinker).
    BUILTIN_LOSSES: ClassVar[Mapping[str, str]] = {
        "importance_sampling": "importance_sampling", "ppo": "ppo", "cispo": "cispo",
        "sft": "cross_entropy", "opmd": "cross_entropy",
    }
    # Its trainer takes one advantage per sequence (backends/tinker/losses.py) and the sampled tokens' logprobs only.
    CANNOT: ClassVar[Mapping[Need, str]] = {
        "critic": "Tinker trains one LoRA policy and returns only the sampled tokens' logprobs: no value model; use "
                  "grpo, dr-grpo (grpo with norm_adv_by_std_in_grpo false), rloo, reinforceplusplus, opmd, cispo, gspo "
                  "or sft",
        "teacher": "the teacher is scored by auxiliary vLLM engines beside a local policy; the Tinker policy samples "
                   "on its service, and its trainer takes one advantage per sequence (backends/tinker/losses.py)",
        "steps": "the Tinker trainer takes one advantage per sequence (backends/tinker/losses.py)",
        "pairs": "the Tinker trainer takes sampled experiences, one advantage each: a preference dataset's pairs are "
                 "not wired to it",
        "expert_rows": "the Tinker trainer takes one advantage per sequence and no expert rows "
                       "(backends/tinker/losses.py)",
        "teacher_topk": "Tinker returns only the sampled tokens' logprobs (also to forward_backward_custom)",
    }
    KL_LOSSES: ClassVar[Collection[str] | None] = None  # our estimators, in the custom loss (a reference sampler scores)
    ENTROPY_LOSSES: ClassVar[Collection[str]] = ()  # Tinker returns the sampled tokens' logprobs only
    WEIGHTS: ClassVar[str] = "tinker"
    WEIGHTS_NOTE: ClassVar[str] = "stay on the Tinker server and move as tinker:// paths"
    SYNC_METHODS: ClassVar[tuple[str, ...]] = ("checkpoint",)
    MODULES: ClassVar[tuple[str, ...]] = ("backends/tinker/", "algorithms/")
    SETTINGS: ClassVar[dict[str, Entry]] = {
        "train_mlp": honoured(note="the local skyrl server always trains attn+mlp"),
        "loss_fn": honoured(passthrough=True, note="built-in names are Tinker's own"),
        "base_url": honoured(note="else $TINKER_BASE_URL, else the hosted service"),
        "grad_clip": honoured(note="AdamParams.grad_clip_norm (skyrl ignores it)"),
        "micro_batch_size": warned("Tinker batches on its own server: micro_batch_size has no effect"),
    }
    ALGORITHM_SETTINGS: ClassVar[dict[str, Entry]] = {
        # our ppo (forward_backward_custom) has the dual clip; Tinker's built-in has not
        "algorithm.policy_loss_fn[ppo].clip_ratio_c": honoured().warn_if(
            lambda v, c: c.trainer.builtin_loss(c.algorithm, c.trainer.loss_fn) is not None,
            "Tinker's built-in ppo has no dual clip: clip_ratio_c is not applied (trainer.loss_fn 'custom' runs ours, "
            "which has it)"),
    }

    trainer_type: Literal["tinker"] = Field("tinker", description="The Tinker service.")
    base_model: str | None = Field(None, description="The service's name of the base model; None: model.model_path.")
    rank: int = Field(32, ge=1, description="LoRA rank.")
    seed: int | None = Field(None, description="Seed of the training client; None: the service's default.")
    train_mlp: bool = Field(True, description="Put adapters on MLP layers.")
    train_attn: bool = Field(True, description="Put adapters on attention layers.")
    train_unembed: bool = Field(True, description="Put an adapter on the unembedding (LM head).")
    loss_fn: Literal["auto", "importance_sampling", "ppo", "cispo", "custom"] = Field(
        "auto",
        description="How the policy loss runs on the service. auto: Tinker's built-in loss matching "
        "algorithm.policy_loss_fn (ppo with its clip range, cispo, importance_sampling; sft as cross_entropy), "
        "else custom; custom: our own loss through forward_backward_custom.",
    )
    base_url: str | None = Field(
        None, description="Service address; None: $TINKER_BASE_URL, else the hosted service. Never put a key here."
    )

    @classmethod
    def builtin_loss(cls, algorithm: Any, loss_fn: str = "auto") -> str | None:
        """The Tinker built-in loss `algorithm`'s policy loss runs as with trainer.loss_fn `loss_fn`; None:
        ours, through forward_backward_custom (no built-in, loss_fn custom, or ppo with sequence masking)."""
        masked = algorithm.policy_loss_fn == "ppo" and (algorithm.policy_loss_fn_args or {}).get("enable_sequence_masking")
        if loss_fn == "custom" or masked or has_kl_term(algorithm):  # a built-in loss has no KL term
            return None
        return cls.BUILTIN_LOSSES.get(algorithm.policy_loss_fn)

    def check(self, r: Resolver[Sections], rollout: InferenceBase) -> None:
        """Tinker trains and samples on one service: its trainer and its sampler come together. Advantages
        are computed outside the trainer (tasks/explore.py), so every outcome-advantage algorithm runs here;
        what needs what Tinker does not give (`CANNOT`: a critic, per-token advantages, the full distribution) is
        refused by `check_needs`; here, the rest of what it cannot run."""
        c = r.config
        kind = stage_kind(c)
        if rollout.WEIGHTS != self.WEIGHTS and kind.explores:
            r.error("explorer.rollout_model.engine_type",
                    f"{rollout.engine_type!r} cannot sample what trainer_type 'tinker' trains; use 'tinker' "
                    "(or set model.tinker.enable: true)")
        alg = c.algorithm
        self._kl(r)
        if self._takes_process_rewards(c.buffer.explorer_input.taskset):
            r.error("buffer.explorer_input.taskset.reward_fn_args.step_token_reward",
                    "process rewards differ per token, and the Tinker trainer takes one advantage per sequence "
                    "(backends/tinker/losses.py); use step_penalty (per answer) or trainer_type 'torch'")
        entropy = (alg.entropy_loss_fn_args or {}).get("entropy_coef", 0.0)
        if not is_off(alg.entropy_loss_fn) and alg.entropy_loss_fn not in self.ENTROPY_LOSSES and entropy:
            r.error("algorithm.entropy_loss_fn_args.entropy_coef",
                    f"{entropy}: an entropy term needs the whole token distribution; Tinker returns only the "
                    "sampled tokens' logprobs (also to forward_backward_custom); set 0")
        if self.loss_fn not in ("auto", "custom") and self.BUILTIN_LOSSES.get(alg.policy_loss_fn) != self.loss_fn:
            r.error("trainer.loss_fn", f"{self.loss_fn!r} is not algorithm.policy_loss_fn {alg.policy_loss_fn!r}; use "
                                       "'auto' (Tinker's built-in of that loss when it has one) or 'custom' (our own loss)")
        if kind.flow == "bench":
            r.error("mode", "'bench' evaluates converted checkpoints with vLLM; convert the Tinker checkpoints with "
                            "`rft convert` (it downloads each adapter) and bench with trainer_type torch, engine_type vllm")
        if self.base_model is None:
            r.derive(self, "base_model", c.model.model_path, "trainer.base_model", "model.model_path")
        if c.model.lora_configs is not None:
            r.warn("model.lora_configs is ignored: trainer_type is 'tinker', which trains its own LoRA "
                   f"(rank trainer.rank = {self.rank})")

    @staticmethod
    def _takes_process_rewards(taskset: Any) -> bool:
        """Whether the training taskset (None in an SFT stage) gives per-token process rewards; a value that is no
        number ≥ 0 is the taskset's own error (schemas/rules.py), not this one."""
        if taskset is None:
            return False
        try:
            return bool(step_arg(taskset.reward_fn_args or {}, "step_token_reward", taskset.default_reward_fn_type))
        except RewardArgsError:
            return False

    def _kl(self, r: Resolver[Sections]) -> None:
        """KL toward the reference, in the reward (kl_penalty_fn) and in the loss (kl_loss_fn), runs with the stage's
        starting weights as the reference, scored by a sampling client of them on the service. A KL term in the
        loss costs that scoring and runs the loss through forward_backward_custom, so a preset's default term is
        switched off (derived) and one the user sets runs. Another reference model (model.ref_model_path) is refused."""
        alg = r.config.algorithm
        if r.config.model.ref_model_path is not None:
            r.error("model.ref_model_path", "trainer_type 'tinker' takes the stage's starting weights as the reference "
                                            "(a sampling client of them); another reference model is not served")
        derived = r.config.derived
        preset_default = "algorithm.kl_loss_fn" in derived and "algorithm.kl_loss_fn_args.kl_coef" in derived
        if not has_kl_term(alg) or not preset_default:
            return
        for key in [k for k in derived if k.startswith("algorithm.kl_loss_fn_args.")]:
            derived.pop(key)
        reason = (f"trainer_type 'tinker': the {alg.algorithm_type!r} preset's KL term is off (it would score every "
                  "batch on a reference sampler and run the loss through forward_backward_custom); set "
                  "algorithm.kl_loss_fn to turn it on")
        r.derive(alg, "kl_loss_fn", "none", "algorithm.kl_loss_fn", reason)
        set_unmarked(alg, "kl_loss_fn_args", {"kl_coef": 0.0})

    @classmethod
    def carried_from(cls, section: dict[str, Any], previous: TrainerBase) -> dict[str, tuple[Any, str]]:
        """A Tinker stage after a Tinker stage goes on from the same base model's LoRA (its weights stay on
        the Tinker server)."""
        if isinstance(previous, cls) and not section.get("base_model"):
            return {"base_model": (previous.base_model, "base model of Tinker stage")}
        return {}

    @classmethod
    def switched_to(cls, data: dict[str, Any]) -> None:
        """Switching to Tinker (`--set model.tinker.enable=true`) drops what moved or shaped local weights:
        a sync_method of local tensors (memory, nccl: the CPU recipes set memory) — Tinker's weights stay on
        its server and move as tinker:// paths —, model.lora_configs, whose rank becomes trainer.rank (Tinker
        trains its own LoRA), and trainer.micro_batch_size (the server batches). Set in the same config as
        trainer_type tinker, those are refused or warned about instead."""
        derived = data.setdefault("derived", {})
        sync = data.get("synchronizer")
        if isinstance(sync, dict) and sync.get("sync_method") in ("memory", "nccl", "online"):
            method = sync.pop("sync_method")
            derived["synchronizer.sync_method"] = (f"{ALIAS}dropped {method!r}: with trainer_type 'tinker' weights move "
                                                   "as tinker:// paths")
        model = data.get("model")
        if isinstance(model, dict) and model.get("lora_configs"):
            lora = model.pop("lora_configs")[0]
            trainer = data.setdefault("trainer", {})
            if isinstance(trainer, dict) and "rank" not in trainer and isinstance(lora, dict) and "lora_rank" in lora:
                trainer["rank"] = lora["lora_rank"]
                derived["trainer.rank"] = f"{ALIAS}model.lora_configs' lora_rank (Tinker trains its own LoRA)"
            derived["model.lora_configs"] = f"{ALIAS}dropped: trainer_type 'tinker' trains its own LoRA (trainer.rank)"
        trainer = data.get("trainer")
        if isinstance(trainer, dict) and trainer.pop("micro_batch_size", None) is not None:
            derived["trainer.micro_batch_size"] = f"{ALIAS}dropped: Tinker batches on its own server"
