"""`trainer`: one choice of training backend — torch, veRL or Tinker — its settings, and what it can run.

The section is a discriminated union on `trainer_type` (Trinity's name): each variant holds the
settings shared by every trainer plus its own, so a setting of another backend is an error naming
it, never silently ignored. Trinity's `model.tinker.enable` maps onto `trainer_type: tinker` (see
`schemas.trinity.aliases`).

Each variant is also the one place of its backend's facts (prime-rl's way: the rules live with the
settings they are about):
- class-level declarations: what it cannot provide of what an algorithm's pieces need (`CANNOT`, each with
  why: a piece runs on it when its declared needs, algorithms/registry.py, are a subset of the rest, and its
  refusal is generated from the need it lacks), the KL terms and entropy terms it runs, the sync methods
  its weights can travel by, where its weights live, the modules that implement it;
- `SETTINGS`: how the backend treats each of its settings, and `ALGORITHM_SETTINGS`: where it departs
  from "read in its MODULES" for the algorithm settings every trainer implements (schemas/support.py
  collects both; tests/test_settings_wired.py checks them against the code);
- `check(r)`: its own rules — refusals naming the field and why, derived values, warnings — which
  schemas/rules.py calls for the chosen trainer.
The backend's modules read these sets from here (schemas cannot import backends), so each is written once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import Field

from algorithms import POLICY_LOSS_FNS, has_kl_term, is_preference_loss, needs_critic
from algorithms.kl import VERL_ESTIMATORS
from algorithms.needs import pieces
from algorithms.registry import NEED_TEXT, NEEDS, Need, is_off
from schemas.algorithm_registry import SAMPLE_STRATEGY_NEEDS
from schemas.base import ALIAS, Section, Variant, set_unmarked
from schemas.resolver import Resolver
from schemas.rewards import RewardArgsError, step_arg
from schemas.stage_kind import stage_kind
from schemas.wiring import Entry, honoured, refused, warned

if TYPE_CHECKING:
    from schemas.explorer import InferenceBase
    from schemas.sections import Sections

TRAINER_TYPES = ("torch", "verl", "tinker")
DEFAULT_TRAINER_TYPE = "verl"  # Trinity-RFT's default
# The needs a stage that explores but does not train still has of its trainer backend's (the explorer's side of
# it: the advantages are made there); a stage that trains has them all.
EXPLORER_NEEDS: frozenset[Need] = frozenset({"teacher", "greedy_baseline", "groups", "steps"})


class TrainerBase(Variant):
    """Settings every trainer honours, and the facts every trainer backend declares (defaults: a trainer
    on this cluster that runs every loss and term algorithms/ implements)."""

    TAG: ClassVar[str] = "trainer_type"
    # What it cannot provide of what a piece may need (algorithms/registry.py `Need`), with why: it provides every
    # other need, and runs each policy loss, advantage, KL term and sample strategy whose needs it provides.
    CANNOT: ClassVar[Mapping[Need, str]] = {}
    # KL-to-reference estimators (kl_loss_fn) and entropy terms (entropy_loss_fn); None: every one built.
    KL_LOSSES: ClassVar[Collection[str] | None] = None
    ENTROPY_LOSSES: ClassVar[Collection[str] | None] = None
    # Where its trained weights live: "local" (Hugging Face folders and tensors the vLLM engines load, the
    # start of a next stage) or "tinker" (on the Tinker service, as tinker:// paths). Engines declare the
    # same of what they sample (schemas/explorer.py).
    WEIGHTS: ClassVar[str] = "local"
    WEIGHTS_NOTE: ClassVar[str] = ""  # where its weights go, when only some sync methods move them ("they ...")
    # synchronizer.sync_method values its weights can travel by.
    SYNC_METHODS: ClassVar[tuple[str, ...]] = ("nccl", "memory", "checkpoint")
    # The runtime modules (files, or folders ending in /) that implement it: the algorithm settings every
    # trainer implements must be read there, unless ALGORITHM_SETTINGS says otherwise.
    MODULES: ClassVar[tuple[str, ...]] = ()
    SETTINGS: ClassVar[dict[str, Entry]] = {}
    ALGORITHM_SETTINGS: ClassVar[dict[str, Entry]] = {}
    # True: the trainer actor only drives worker processes of its own that hold the devices (the resource
    # plan gives the actor none and the workers the trainer's share).
    DEVICES_IN_WORKERS: ClassVar[bool] = False

    save_interval: int = Field(0, ge=0, description="Checkpoint every this many train steps (0: only at the end).")
    max_checkpoints_to_keep: int | None = Field(
        None, ge=1, description="Keep the newest this many global_step_N checkpoints; an older one is deleted once a "
        "newer one is whole (veRL's max_actor_ckpt_to_keep). None: keep all.",
    )
    save_hf_checkpoint: Literal["last", "always", "never"] = Field(
        "last", description="When to also write a Hugging Face folder (the next stage starts from the last one)."
    )
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient norm.")
    micro_batch_size: int = Field(
        1, ge=1, description="Experiences per forward/backward pass (gradients accumulate over the train batch)."
    )

    @classmethod
    def provides(cls) -> frozenset[Need]:
        return frozenset(NEEDS) - frozenset(cls.CANNOT)

    @classmethod
    def policy_losses(cls) -> list[str]:
        """The policy losses it runs: those whose needs it provides."""
        return [name for name in POLICY_LOSS_FNS if POLICY_LOSS_FNS.needs_of(name) <= cls.provides()]

    def check_needs(self, r: Resolver[Sections]) -> None:
        """Refuse each piece of the algorithm (its policy loss, advantage, KL terms, sample strategy) that needs what
        this backend cannot provide, naming the piece, the need, why, and the trainers that run it; each need once,
        at the first piece that has it. A stage that only explores has only the explorer's needs of it."""
        c = r.config
        kind = stage_kind(c)
        alg = c.algorithm
        named: set[Need] = set()
        strategy = ("sample_strategy", alg.sample_strategy, SAMPLE_STRATEGY_NEEDS.get(alg.sample_strategy, frozenset()))
        for field, name, needs in [*pieces(alg, strict=False), strategy]:
            for need in [n for n in NEEDS if n in needs and n in self.CANNOT and n not in named]:
                if not kind.trains and not (kind.explores and need in EXPLORER_NEEDS):
                    continue
                named.add(need)
                if str(c.derived.get(f"algorithm.{field}", "")).startswith("preset of"):
                    field, name = "algorithm_type", alg.algorithm_type  # what the user wrote
                others = " or ".join(repr(t) for t, variant in TRAINER_VARIANTS.items() if needs <= variant.provides())
                r.error(f"algorithm.{field}", f"{name!r} needs {NEED_TEXT[need]}, which trainer_type "
                        f"{self.trainer_type!r} cannot train with: {self.CANNOT[need]}"
                        + (f"; trainer_type {others} runs it" if others else ""))

    def check(self, r: Resolver[Sections], rollout: InferenceBase) -> None:
        """This backend's own rules, run by schemas/rules.py once the algorithm and model are resolved; `rollout`: the
        explorer's rollout model, the engines that sample what it trains."""

    @classmethod
    def carried_from(cls, section: dict[str, Any], previous: TrainerBase) -> dict[str, tuple[Any, str]]:
        """Settings a stage whose trainer section is `section` (as written) takes over from the training
        stage before it: {field: (value, why)}."""
        return {}


class CriticOptimConfig(Section):
    """The critic's optimizer: AdamW with the policy's betas, eps and weight decay and schedule (veRL's
    `critic.optim`; only its learning rate differs by default)."""

    lr: float = Field(1e-5, gt=0, description="Peak learning rate of the critic (veRL's and Trinity's critic.optim.lr).")


class CriticConfig(Section):
    """The value model of PPO with GAE (advantage_fn 'ppo'): model.critic_model_path (by default the policy's
    model) with a scalar head, trained beside the policy on the same batches (Trinity's
    trainer.trainer_config.critic, veRL's critic section: the same names)."""

    optim: CriticOptimConfig = Field(default_factory=CriticOptimConfig, description="The critic's optimizer.")
    cliprange_value: float = Field(
        0.5, gt=0, description="Clip range of the value loss: new values are clipped to old ± this (veRL's default)."
    )
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient norm of the critic.")
    ppo_epochs: int = Field(
        1, ge=1, description="Optimizer steps of the critic on each batch (veRL's critic.ppo_epochs): from the second "
        "on, its values have moved from the old ones and cliprange_value binds.")
    critic_warmup: int = Field(
        0, ge=0, description="Train steps at the start in which only the critic learns (veRL's trainer.critic_warmup): "
        "the policy keeps its weights until the values have settled.")


# The `critic` section of a trainer that trains one (torch, veRL).
CRITIC_SETTINGS: dict[str, Entry] = {
    "critic": honoured().warn_if(
        lambda v, c: not needs_critic(c.algorithm),
        "has no effect: only advantage_fn 'ppo' (GAE, the ppo preset) trains a critic"),
}


def critic_field() -> Any:  # noqa: ANN401  (a pydantic FieldInfo)
    return Field(default_factory=CriticConfig,
                 description="The critic of advantage_fn 'ppo' (GAE): learning rate, value clip.")


class TorchTrainerConfig(TrainerBase):
    """The native torch trainer: a transformers model (optionally LoRA via peft), CPU or one GPU."""

    MODULES: ClassVar[tuple[str, ...]] = ("backends/torch_trainer.py", "backends/batch.py", "algorithms/")
    SETTINGS: ClassVar[dict[str, Entry]] = {
        **CRITIC_SETTINGS,
    }

    trainer_type: Literal["torch"] = Field("torch", description="The native torch trainer.")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Parameter and compute dtype.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when available, else cpu.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations to save memory.")
    num_threads: int | None = Field(None, ge=1, description="torch intra-op threads; None: what the policy plans.")
    skip_zero_advantage: bool = Field(
        True,
        description="Leave out of the forward/backward pass the experiences whose advantage is 0 when no KL or "
        "entropy term is on: they add nothing to the gradient, so the update is the same, only cheaper.",
    )
    share_prompt: bool = Field(
        True,
        description="Give each prompt with several samples (a GRPO group) micro-batches of its own, run the prompt "
        "once in each and let every response attend to it: the same loss and gradient with fewer tokens. Rows whose "
        "prompts differ but open alike (a system prompt of 16 tokens or more, as SFT rows do) share that opening "
        "the same way. Off with "
        "gradient_checkpointing.",
    )
    seed: int = Field(
        42, description="Seed of torch's RNG before the models are built (LoRA's matrices, the critic's value head): "
        "two runs of one config start alike. A resumed run continues the checkpoint's RNG."
    )
    critic: CriticConfig = critic_field()


class VerlTrainerConfig(TrainerBase):
    """veRL's FSDP training engine (its engine workers on Ray), CPU for tests or GPUs."""

    # The losses veRL has of its own: our policy_loss_fn -> a policy_loss.loss_mode of its ppo_loss, or "sft" (its
    # sft loss, read the way ppo_loss reads the batch: backends/verl/losses.py). Every other loss it runs is ours:
    # as the rft_<name> loss mode of its ppo_loss when it needs nothing more than ppo_loss hands a policy loss
    # (log-probs, advantages, the response mask), else whole as the engine's loss (`runs_whole`).
    LOSS_MODES: ClassVar[Mapping[str, str]] = {"ppo": "vanilla", "gspo": "gspo", "cispo": "cispo", "sft": "sft"}
    CANNOT: ClassVar[Mapping[Need, str]] = {
        "batch_mask": "veRL's engine computes the loss one micro-batch at a time, with no pass over the whole batch's "
                      "log-probs before it",
        "teacher_topk": "veRL's engine hands a loss the sampled tokens' log-probs only, not the whole distribution",
    }
    KL_LOSSES: ClassVar[Collection[str]] = VERL_ESTIMATORS  # veRL's own kl_penalty computes the term
    DEVICES_IN_WORKERS: ClassVar[bool] = True  # veRL's engine workers
    MODULES: ClassVar[tuple[str, ...]] = ("backends/verl/", "algorithms/verl_compat.py", "algorithms/policy_loss/")
    SETTINGS: ClassVar[dict[str, Entry]] = {
        "strategy": honoured(passthrough=True),
        "attn_implementation": honoured(passthrough=True),
        "trainer_config": honoured(note="veRL's own tree, merged last"),
        **CRITIC_SETTINGS,
    }
    ALGORITHM_SETTINGS: ClassVar[dict[str, Entry]] = {
        "algorithm.optimizer.lr_scheduler_type": honoured(passthrough=True, note="veRL's schedulers have the same names"),
        "algorithm.policy_loss_fn[*].loss_agg_mode": honoured(passthrough=True, note="veRL's agg_loss modes have the same names"),
        "algorithm.policy_loss_fn[ppo].enable_sequence_masking": refused(
            "veRL's ppo loss has no sequence masking; turn it off or use trainer_type 'torch'"),
        "algorithm.policy_loss_fn[ppo].delta_sequence_masking": warned(
            "has no effect: veRL's ppo loss has no sequence masking"),
        "algorithm.policy_loss_fn[sft].loss_agg_mode": refused(
            "veRL's sft loss is a token mean over the batch; use token-mean or trainer_type 'torch'"),
    }

    trainer_type: Literal["verl"] = Field("verl", description="veRL FSDP workers.")
    use_dynamic_bsz: bool = Field(True, description="Pack micro-batches by token count.")
    max_token_len_per_gpu: int | None = Field(
        None, ge=1, description="Token budget per micro-batch with use_dynamic_bsz; None: 2 × model.max_model_len."
    )
    ulysses_sequence_parallel_size: int = Field(
        1, ge=1, description="Sequence-parallel degree (needs use_remove_padding; heads must divide by it)."
    )
    strategy: Literal["fsdp2", "fsdp"] = Field(
        "fsdp2", description="veRL's FSDP version: fsdp2 (fully_shard, CPU and GPU) or fsdp (FSDP1, GPUs only)."
    )
    cpu_workers: int = Field(
        1, ge=1, description="Training processes on a cluster without GPUs (FSDP over gloo); on GPUs there is one "
        "per trainer GPU (the cluster's GPUs minus the rollout engines')."
    )
    model_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="Dtype the weights are loaded, kept and optimised in (veRL's fsdp_config.model_dtype)."
    )
    param_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Compute dtype of forward and backward (FSDP mixed precision); auto: bfloat16 on GPUs "
        "(veRL's default), float32 on CPU."
    )
    gradient_checkpointing: bool = Field(True, description="Recompute activations in backward to save memory.")
    use_remove_padding: bool = Field(
        True, description="Pack the batch's sequences into one row without padding (varlen attention)."
    )
    attn_implementation: Literal["auto", "sdpa", "flash_attention_2", "eager"] = Field(
        "auto", description="Attention kernel of the trained model; auto: flash_attention_2 on GPUs where the "
        "flash_attn package is installed, else sdpa."
    )
    use_torch_compile: bool | None = Field(
        None, description="torch.compile veRL's entropy-from-logits; None: on GPUs, off on CPU (compiling costs more "
        "than it saves there)."
    )
    fsdp_size: int = Field(
        -1, description="Ranks one copy of the model is sharded over (-1: all; fewer makes HSDP replicas)."
    )
    param_offload: bool = Field(False, description="Keep parameters in CPU memory between forward/backward passes.")
    optimizer_offload: bool = Field(False, description="Keep the optimizer state in CPU memory between steps.")
    seed: int = Field(42, description="Seed of the workers' torch RNG before the model is built (LoRA initialisation).")
    trainer_config: dict[str, Any] = Field(
        default_factory=dict,
        description="veRL's own config tree, merged last over what the other settings map to "
        "(Trinity's trainer.trainer_config), e.g. {actor_rollout_ref: {actor: {...}}}.",
    )
    critic: CriticConfig = critic_field()  # veRL's critic section (its value-model engine), before trainer_config

    @staticmethod
    def runs_whole(name: str | None) -> bool:
        """Losses veRL's ppo_loss cannot carry, run whole (with their KL and entropy terms) as the engine's loss
        (backends/verl/losses.py): those that need more than ppo_loss hands a policy loss — the reference's log-probs
        (dpo), pairs of rows kept together (dpo), expert rows beside the sampled ones (the mix family)."""
        return bool(POLICY_LOSS_FNS.needs_of(name))

    @classmethod
    def adapted(cls, name: str | None) -> bool:
        """Ours, run as the rft_<name> loss mode of veRL's ppo_loss (backends/verl/losses.py)."""
        return name in cls.policy_losses() and name not in cls.LOSS_MODES and not cls.runs_whole(name)

    def check(self, r: Resolver[Sections], rollout: InferenceBase) -> None:
        """What veRL can train: its own loss functions, FSDP2 on CPU, sequence parallel over packed sequences."""
        c = r.config
        if not stage_kind(c).trains:
            return
        alg = c.algorithm
        if is_preference_loss(alg.policy_loss_fn):  # (chosen, rejected) rows must reach the loss side by side
            splits = (f"veRL packs micro-batches by token count, which splits the (chosen, rejected) pairs of "
                      f"{alg.policy_loss_fn!r}")
            if self.use_dynamic_bsz and "use_dynamic_bsz" in self.model_fields_set:
                r.error("trainer.use_dynamic_bsz", f"{splits}; set false (fixed micro-batches, in order)")
            elif self.use_dynamic_bsz:
                r.derive(self, "use_dynamic_bsz", False, "trainer.use_dynamic_bsz",
                         f"{splits}: fixed micro-batches of trainer.micro_batch_size rows, in order")
            if self.micro_batch_size % 2 and "micro_batch_size" in self.model_fields_set:
                r.error("trainer.micro_batch_size", f"{self.micro_batch_size}: {alg.policy_loss_fn!r} trains whole "
                        "(chosen, rejected) pairs; use an even size")
            elif self.micro_batch_size % 2:
                r.derive(self, "micro_batch_size", 2, "trainer.micro_batch_size",
                         f"{alg.policy_loss_fn!r} trains whole (chosen, rejected) pairs: one pair a micro-batch")
        if has_kl_term(alg) and alg.kl_loss_fn not in self.KL_LOSSES:
            r.error("algorithm.kl_loss_fn", f"{alg.kl_loss_fn!r} has no veRL estimator; with trainer_type 'verl' use "
                    f"one of {', '.join(self.KL_LOSSES)}")
        if c.model.ref_model_path is not None and c.model.lora_configs:
            r.error("model.ref_model_path", "with LoRA the veRL trainer's reference is the actor with its adapter off "
                    "(the base model); another reference model is not loaded; unset ref_model_path or use trainer_type "
                    "'torch'")
        if self.ulysses_sequence_parallel_size > 1 and not self.use_remove_padding:
            r.error("trainer.ulysses_sequence_parallel_size",
                    f"{self.ulysses_sequence_parallel_size} needs trainer.use_remove_padding: true (veRL splits packed "
                    "sequences)")
        if self.strategy == "fsdp" and c.cluster.gpu_per_node == 0:
            r.error("trainer.strategy", "'fsdp' (FSDP1) needs GPUs; use 'fsdp2' on CPU")


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


TrainerConfig = Annotated[
    Union[TorchTrainerConfig, VerlTrainerConfig, TinkerTrainerConfig], Field(discriminator="trainer_type")
]
TRAINER_VARIANTS: dict[str, type[TrainerBase]] = {
    "torch": TorchTrainerConfig,
    "verl": VerlTrainerConfig,
    "tinker": TinkerTrainerConfig,
}
