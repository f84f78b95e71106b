"""Native torch trainer: a transformers causal LM (optionally LoRA via peft) trained with AdamW.

CPU or one GPU. The loss itself comes from `algorithms` (built on veRL's core_algos), so this file
is only the model, the optimizer and the bookkeeping around them.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, get_scheduler, set_seed

import algorithms
from algorithms.loss import STEP_METRICS, summed_over_micro_batches
from backends.batch import TrainBatch, collate, micro_batches, stack_padded
from backends.critic import Critic, critic_dir
from backends.reward_kl import STATE_KEY, RewardKL, penalise_before_step
from backends.trainer import TrainerBackend, TrainerDevices, scoring_temperature
from backends.weights import StateWeights, WeightsHandle
from buffer.experience import Experience
from checkpointing.models import resolve_model_path
from checkpointing.safe_load import load_tensors

if TYPE_CHECKING:
    from schemas import ExperimentConfig

CHECKPOINT_FORMAT = "rft-torch-v1"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_SCHEDULERS = {"constant": "constant_with_warmup", "cosine": "cosine_with_min_lr"}
# Both names mean AdamW (decoupled weight decay), as in veRL, whose "adam" is torch's AdamW too.
_OPTIMIZERS = {"adam": torch.optim.AdamW, "adamw": torch.optim.AdamW}


def lr_scheduler(optimizer: torch.optim.Optimizer, opt: Any, total_steps: int) -> Any:
    """The learning-rate schedule of `algorithm.optimizer` (`opt`) over `total_steps` steps: a linear warm-up
    (lr_warmup_steps, else lr_warmup_steps_ratio × total_steps), then constant or a half cosine."""
    warmup = opt.lr_warmup_steps
    if warmup is None or warmup < 0:
        warmup = int(opt.lr_warmup_steps_ratio * total_steps)
    return get_scheduler(
        _SCHEDULERS[opt.lr_scheduler_type],
        optimizer,
        num_warmup_steps=warmup,
        num_training_steps=max(total_steps, 1),
        # cosine decays to lr × min_lr_ratio (veRL's min_lr_ratio), not to 0
        scheduler_specific_kwargs={"min_lr_rate": opt.min_lr_ratio} if opt.lr_scheduler_type == "cosine" else None,
    )


class TorchTrainer(TrainerBackend):
    def __init__(
        self, config: ExperimentConfig, model_dir: Path, total_steps: int, devices: TrainerDevices | None = None
    ) -> None:
        # devices: the trainer actor already set this process's threads and GPU from the plan
        settings = config.trainer
        self.model_dir = Path(model_dir)
        set_seed(settings.seed)  # random, numpy and torch; before any model: LoRA's matrices and the critic's head are random
        if settings.num_threads:
            torch.set_num_threads(settings.num_threads)
        self.config = config
        self.algorithm = config.algorithm
        self.device = _pick_device(settings.device)
        self.temperature = scoring_temperature(config)
        self._step = 0

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.pad_token_id = self.tokenizer.pad_token_id
        if self.pad_token_id is None:
            self.pad_token_id = self.tokenizer.eos_token_id
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=_DTYPES[settings.dtype]).to(self.device)
        self.model.config.use_cache = False
        if settings.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        # Recomputation (gradient checkpointing) and a cache that carries gradients do not mix.
        self.share_prompt = settings.share_prompt and not settings.gradient_checkpointing
        self.is_lora = bool(config.model.lora_configs)
        self.lora_settings: dict | None = None  # what the checkpoint records (the adapter actually trained)
        if self.is_lora:
            self.model, self.lora_settings = _wrap_lora(self.model, config)
        self.reference = self._make_reference(model_dir, settings.dtype)
        self.reward_kl = RewardKL.for_algorithm(self.algorithm)  # algorithm.kl_penalty_fn

        opt = config.algorithm.optimizer
        params = [p for p in self.model.parameters() if p.requires_grad]
        # The fused kernel: one pass over the weights; on CPU 0.09 s instead of 1.0 s for 135M params.
        self.optimizer = _OPTIMIZERS[opt.optimizer_type](
            params, lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps, weight_decay=opt.weight_decay, fused=True
        )
        self.scheduler = lr_scheduler(self.optimizer, opt, total_steps)
        # advantage_fn 'ppo': GAE over a value model's values, trained beside the policy
        self.critic = (Critic(config, model_dir, self.device, _DTYPES[settings.dtype],
                              lambda optimizer: lr_scheduler(optimizer, opt, total_steps))
                       if algorithms.needs_critic(self.algorithm) else None)
        # Whether a zero-advantage sample adds nothing under this algorithm (then it is left out of the pass): the
        # loss declares it, and no term of the whole step (GAE, KL, entropy) gives such a sample a loss of its own.
        self.skips_zero_advantage = (
            settings.skip_zero_advantage
            and self.critic is None  # GAE gives every token its own advantage
            and self.reference is None
            and not algorithms.needs_entropy(self.algorithm)
            and algorithms.zero_at_zero_advantage(self.algorithm.policy_loss_fn, self.algorithm.policy_loss_fn_args)
        )

    # -- TrainerBackend -------------------------------------------------------------------------

    @property
    def global_step(self) -> int:
        return self._step

    def train_step(self, batch: list[Experience]) -> dict[str, float]:
        started = time.perf_counter()
        batch, penalties, kl_metrics = penalise_before_step(
            self.reward_kl, batch, self.critic is not None, self.reference_logprobs)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        tokens = 0
        # Normalising every micro-batch by whole-batch counts makes the summed losses equal the
        # loss over the whole batch (veRL's rule), whatever the micro-batch sizes.
        totals = {
            "global_num_tokens": sum(sum(e.response_mask) for e in batch),
            "global_num_seqs": sum(1 for e in batch if any(e.response_mask)),
        }
        experts = {  # the mix strategy's expert rows: the mix losses normalise them apart (LossInputs.rows)
            "global_expert_tokens": sum(sum(e.response_mask) for e in batch if e.expert),
            "global_expert_seqs": sum(1 for e in batch if e.expert and any(e.response_mask)),
        }
        trained = [e for e in batch if not self._adds_nothing(e)]
        pairs = algorithms.is_preference_loss(self.algorithm.policy_loss_fn)  # dpo: the rows are (chosen, rejected)
        chunks = micro_batches(trained, self.config.trainer.micro_batch_size, pairs=pairs, by_prompt=self.share_prompt)
        micros = [collate([_with_advantage(e) for e in c] if self.critic else c, self.pad_token_id, self.share_prompt)
                  for c in chunks]
        critic_metrics: dict[str, float] = {}
        if self.critic is not None and micros:  # before the policy: the old values make the advantages (veRL's order)
            for chunk, micro in zip(chunks, micros, strict=True) if penalties else ():
                micro.token_penalty = stack_padded([penalties[e.eid].float().unsqueeze(0) for e in chunk], micro.response_width)
            token_advantages, critic_metrics = self.critic.step(micros, totals)
            for micro, advantages in zip(micros, token_advantages, strict=True):
                micro.advantages = advantages
        # critic_warmup: the first steps train the critic only; the policy keeps its weights (and its schedule)
        warming = self.critic is not None and self._step < self.config.trainer.critic.critic_warmup
        # a loss whose mask is chosen over the whole batch (none while the policy waits)
        token_masks, mask_metrics = (None, {}) if warming else self._batch_masks(micros)
        for i, (chunk, micro) in enumerate([] if warming else zip(chunks, micros, strict=True)):
            loss, metrics = self._micro_step(micro, totals | experts, token_masks[i] if token_masks else None)
            loss.backward()
            for key, value in metrics.items():
                if key in STEP_METRICS:
                    sums[key] = value
                    continue
                # Loss terms and the entropy are already whole-batch normalised (they add up); the rest
                # are per-micro-batch averages.
                share = 1.0 if summed_over_micro_batches(key) else len(chunk) / len(batch)
                sums[key] = sums.get(key, 0.0) + value * share
            tokens += self._tokens_run(micro)
        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:  # AdamW skips params without a grad; the full batch would give them zeros
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.config.trainer.grad_clip)
        for key in ("loss", "pg_loss"):  # a batch with nothing to learn from still reports them
            sums.setdefault(key, 0.0)
        lr = self.scheduler.get_last_lr()[0]
        if torch.isfinite(grad_norm) and not warming:
            self.optimizer.step()
        if not warming:
            self.scheduler.step()
        self._step += 1
        seconds = time.perf_counter() - started
        return {
            **sums,
            **kl_metrics,
            **critic_metrics,
            **mask_metrics,
            **({"critic/warmup": 1.0} if warming else {}),
            "grad_norm": float(grad_norm),
            "lr": float(lr),
            "train_tokens": float(tokens),
            "train_tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
            "response_length": float(np.mean([len(e.response_token_ids) for e in batch])),
            "skipped_zero_advantage": float(len(batch) - len(trained)),
        }

    def logprobs(self, batch: list[Experience]) -> list[list[float]]:
        self.model.eval()
        return self._logprobs_of(self.model, batch)

    def reference_logprobs(self, batch: list[Experience]) -> list[list[float]]:
        """Logprob of each response token under the reference model (the KL terms' anchor)."""
        if self.reference is None:
            raise RuntimeError("the torch trainer has no reference model: no KL term, KL penalty or preference loss is on")
        return self._logprobs_of(self.reference, batch)

    def _logprobs_of(self, model: torch.nn.Module, batch: list[Experience]) -> list[list[float]]:
        out: dict[str, list[float]] = {}
        with torch.no_grad():
            for chunk in micro_batches(batch, self.config.trainer.micro_batch_size, by_prompt=self.share_prompt):
                micro = collate([_with_advantage(e) for e in chunk], self.pad_token_id, self.share_prompt)
                token_logprobs, _ = self._response_logprobs(model, micro, with_entropy=False)
                for row, exp in enumerate(chunk):
                    out[exp.eid] = token_logprobs[row, : len(exp.response_token_ids)].tolist()
        return [out[e.eid] for e in batch]

    def publish_weights(self, version: int, folder: Path | None) -> WeightsHandle:
        if folder is None:
            raise ValueError("the torch trainer publishes weights as a folder of safetensors: give one")
        self.export_weights(folder)
        return WeightsHandle(version=version, kind="folder", location=str(folder))

    def push_weights(self, transport, engine_actors, version: int) -> WeightsHandle:  # noqa: ANN001
        # The file names, as vLLM loads them (not the module's own names: a MoE's fused experts, LoRA's layers)
        return transport.push_weights(engine_actors, StateWeights(self._full_state_dict(keep_device=True)), version)

    def export_weights(self, model_dir: Path) -> Path:
        """Writes `model.safetensors` (LoRA merged in) atomically into an existing HF folder."""
        model_dir.mkdir(parents=True, exist_ok=True)
        target = model_dir / "model.safetensors"
        tmp = model_dir / f".model.safetensors.{os.getpid()}.tmp"
        save_file(self._full_state_dict(), str(tmp), metadata={"format": "pt"})
        os.replace(tmp, target)
        return target

    def save_checkpoint(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        trainable = {n: p.detach().cpu().contiguous() for n, p in self.model.named_parameters() if p.requires_grad}
        save_file(_untie(trainable), str(path / "trainable.safetensors"))
        torch.save(
            {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "rng": _rng_state(),
            },
            path / "optim_state.pt",
        )
        lora = self.lora_settings if self.is_lora else None
        state = {
            "format": CHECKPOINT_FORMAT,
            "global_step": self._step,
            "base_model_dir": str(self.model_dir.resolve()),
            # trainable.safetensors holds all weights (HF names), or with LoRA only the adapter (peft names)
            "lora": lora,
        }
        if self.reward_kl is not None:  # the KL penalty's (adaptive) coefficient
            state[STATE_KEY] = self.reward_kl.state_dict()
        if self.critic is not None:
            self.critic.save(critic_dir(path))
        (path / "trainer_state.json").write_text(json.dumps(state, indent=2))

    def load_checkpoint(self, path: Path) -> None:
        trainable = load_file(str(path / "trainable.safetensors"))
        missing = set(trainable) - {n for n, _ in self.model.named_parameters()}
        if missing:
            raise ValueError(f"checkpoint {path} has parameters this model lacks: {sorted(missing)[:5]}")
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, tensor in trainable.items():
                params[name].copy_(tensor.to(params[name].dtype))
        state = load_tensors(path / "optim_state.pt")  # weights_only: nothing of the file runs
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        _set_rng_state(state["rng"])
        saved = json.loads((path / "trainer_state.json").read_text())
        self._step = saved["global_step"]
        if self.reward_kl is not None:
            self.reward_kl.load_state_dict(saved.get(STATE_KEY))
        if self.critic is not None:
            self.critic.load(critic_dir(path))

    # -- internals ------------------------------------------------------------------------------

    def _adds_nothing(self, exp: Experience) -> bool:
        """An experience whose every loss term is zero: advantage 0, and no KL or entropy term."""
        return (
            self.skips_zero_advantage
            and exp.advantage == 0.0
            and not exp.expert  # an expert row's loss is its likelihood
            and not any(exp.token_advantages or ())  # a teacher's advantages differ per token
            and not any(exp.token_rewards or ())  # so do process rewards
        )

    def _batch_masks(self, micros: list[TrainBatch]) -> tuple[list[torch.Tensor] | None, dict[str, float]]:
        """Each micro-batch's part of a token mask chosen over the whole batch (algorithms.BATCH_MASKS: m2po), from the
        current log-probs of every micro-batch (a pass without gradients); None when the loss has none."""
        choose = algorithms.BATCH_MASKS.get(self.algorithm.policy_loss_fn)
        if choose is None or not micros:
            return None, {}
        with torch.no_grad():
            current = [self._response_logprobs(self.model, m, with_entropy=False)[0] for m in micros]
        width = max(m.response_width for m in micros)
        def pad(rows: list[torch.Tensor]) -> torch.Tensor:
            return stack_padded([t.to(self.device) for t in rows], width)
        args = algorithms.POLICY_LOSS_FNS.resolve_args(self.algorithm.policy_loss_fn, self.algorithm.policy_loss_fn_args)
        mask, metrics = choose(pad(current), pad([m.old_logprobs for m in micros]), pad([m.advantages for m in micros]),
                               pad([m.response_mask for m in micros]), args)
        parts, row = [], 0
        for m in micros:
            rows = m.input_ids.shape[0]
            parts.append(mask[row : row + rows, : m.response_width])
            row += rows
        return parts, metrics

    def _micro_step(
        self, micro: TrainBatch, totals: dict[str, int], token_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        log_probs = self._response_log_probs(self.model, micro)
        logprobs, entropy = self._token_logprobs(log_probs, micro, with_entropy=algorithms.needs_entropy(self.algorithm))
        topk = micro.teacher_topk_ids  # the teacher's top-k tokens (topk_distill): the student's log-probs of them
        student_topk = log_probs.gather(-1, topk.to(self.device)) if topk is not None else None
        ref_logprobs = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logprobs, _ = self._response_logprobs(self.reference, micro, with_entropy=False)
        inputs = algorithms.LossInputs(
            logprobs=logprobs,
            old_logprobs=micro.old_logprobs.to(self.device),
            advantages=micro.advantages.to(self.device),
            response_mask=micro.response_mask.to(self.device),
            ref_logprobs=ref_logprobs,
            entropy=entropy,
            expert_mask=micro.expert_mask.to(self.device) if micro.expert_mask is not None else None,
            step=self._step + 1,
            token_mask=token_mask,
            teacher_topk_logprobs=micro.teacher_topk_logprobs.to(self.device) if student_topk is not None else None,
            student_topk_logprobs=student_topk,
            **totals,
        )
        return algorithms.compute_loss(self.algorithm, inputs)

    def _response_logprobs(
        self, model: torch.nn.Module, micro: TrainBatch, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logprob of each response token under `model` at the rollout temperature."""
        return self._token_logprobs(self._response_log_probs(model, micro), micro, with_entropy)

    def _response_log_probs(self, model: torch.nn.Module, micro: TrainBatch) -> torch.Tensor:
        """[B, R, vocab]: `model`'s log-probs at each response position, at the rollout temperature."""
        logits = self._response_logits(model, micro).float() / self.temperature
        return torch.log_softmax(logits, dim=-1)

    def _token_logprobs(
        self, log_probs: torch.Tensor, micro: TrainBatch, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The response tokens' log-probs out of the whole distribution, and its entropy per position."""
        targets = micro.response_ids.to(self.device).unsqueeze(-1)
        token_logprobs = log_probs.gather(-1, targets).squeeze(-1)
        if with_entropy:  # a loss term: gradients flow through it
            return token_logprobs, -(log_probs.exp() * log_probs).sum(-1)
        with torch.no_grad():  # only the `entropy` metric
            detached = log_probs.detach()
            return token_logprobs, -(detached.exp() * detached).sum(-1)

    def _response_logits(self, model: torch.nn.Module, micro: TrainBatch) -> torch.Tensor:
        """[B, R, vocab]: the logits that predict each response token."""
        if self._shares(micro):
            return self._shared_prompt_logits(model, micro)
        out = model(
            input_ids=micro.input_ids.to(self.device),
            attention_mask=micro.attention_mask.to(self.device),
            position_ids=micro.position_ids.to(self.device),
            logits_to_keep=micro.response_width + 1,  # only the columns that predict response tokens
            use_cache=False,
        )
        return out.logits[:, :-1, :]

    def _shares(self, micro: TrainBatch) -> bool:
        return micro.shared_prompt is not None and self.share_prompt

    def _tokens_run(self, micro: TrainBatch) -> int:
        """Tokens the forward pass computes: a shared prompt (or opening) counts once."""
        if not self._shares(micro):
            return micro.num_tokens
        return micro.num_tokens - (micro.input_ids.shape[0] - 1) * len(micro.shared_prompt)

    def _shared_prompt_logits(self, model: torch.nn.Module, micro: TrainBatch) -> torch.Tensor:
        """The same logits, with the prompt (or opening) that every row shares run once instead of once per row.

        Its keys and values (kept in the autograd graph) are repeated for every row, and the rest of each
        row attends to them: each row computes what the padded batch computes, and the shared tokens'
        gradient is the sum over rows, as there. A GRPO group of 8 trains ~1.9x fewer tokens; SFT rows
        under one system prompt ~1.7x fewer.
        """
        rows, width = micro.response_ids.shape
        prompt = micro.shared_prompt.to(self.device).unsqueeze(0)
        opening = prompt.shape[1]
        cache = DynamicCache(config=model.config)  # the layer types (full or sliding attention)
        head = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        whole = opening == micro.prompt_width  # the rows share their whole prompt: its last logits predict token 0
        first = head.logits[:, -1:, :].expand(rows, -1, -1)
        if whole and width == 1:
            return first
        cache.batch_repeat_interleave(rows)
        # The columns after the opening, but the last: each row's own prompt tail (left-padded) and its response
        # tokens 0..R-2. The last R columns' logits predict the response (R-1 of them when the prompt is whole).
        mask = micro.attention_mask[:, opening:-1].to(self.device)
        body = model(
            input_ids=micro.input_ids[:, opening:-1].to(self.device),
            attention_mask=torch.cat([torch.ones((rows, opening), dtype=mask.dtype, device=self.device), mask], dim=1),
            position_ids=micro.position_ids[:, opening:-1].to(self.device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=width - 1 if whole else width,
        )
        return torch.cat([first, body.logits], dim=1) if whole else body.logits

    def _make_reference(self, model_dir: Path, dtype: str) -> torch.nn.Module | None:
        """The reference of the KL terms and of a preference loss (dpo): model.ref_model_path, else the model
        this stage starts from."""
        if not algorithms.needs_reference_model(self.algorithm):
            return None
        ref_path = self.config.model.ref_model_path
        source = resolve_model_path(ref_path) if ref_path else model_dir
        reference = AutoModelForCausalLM.from_pretrained(source, dtype=_DTYPES[dtype]).to(self.device)
        reference.eval().requires_grad_(False)
        return reference

    def _full_state_dict(self, keep_device: bool = False) -> dict[str, torch.Tensor]:
        """HF-named weights with any LoRA adapter merged, as vLLM and transformers load them; on the CPU, or where
        the model is (`keep_device`: a push over NCCL sends GPU tensors)."""
        def copy(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.detach().contiguous() if keep_device else tensor.detach().cpu().contiguous()

        if not self.is_lora:
            return hf_file_names(self.model, {k: copy(v) for k, v in self.model.state_dict().items()})
        self.model.merge_adapter()
        try:
            state = {}
            for key, value in self.model.get_base_model().state_dict().items():
                if "lora_" in key:
                    continue
                # peft wraps a wrapped layer again (a MoE's experts: base_layer.base_layer.gate_up_proj)
                state[re.sub(r"(\.base_layer)+\.", ".", key)] = copy(value).clone()  # unmerged below, in place
        finally:
            self.model.unmerge_adapter()
        return hf_file_names(self.model.get_base_model(), state)


def _with_advantage(exp: Experience) -> Experience:
    """collate() insists on an advantage; scoring logprobs needs none."""
    if exp.advantage is not None:
        return exp
    return replace(exp, advantage=0.0)


def hf_file_names(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` (the module's own parameter names) under the names a Hugging Face folder holds, one tensor per
    tied group. transformers 5 keeps some weights in another layout than its files: a mixture of experts' experts
    fused into one tensor per layer (`mlp.experts.gate_up_proj`) where the files, and vLLM, have one per expert
    (`mlp.experts.0.gate_proj.weight`); its save_pretrained converts back, and so must every export."""
    from transformers.core_model_loading import revert_weight_conversion

    return _untie(revert_weight_conversion(model, state))


def _untie(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors sharing memory (tied embeddings): keep one name of each."""
    seen: dict[int, str] = {}
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        key = tensor.data_ptr()
        if key in seen and tensor.numel() > 0:
            continue
        seen[key] = name
        out[name] = tensor
    return out


def _wrap_lora(model: torch.nn.Module, config: ExperimentConfig) -> tuple[torch.nn.Module, dict]:
    """The model with a trainable LoRA adapter: a fresh one, or the one at `lora_configs[0].path`;
    and the settings the checkpoint records (those of the adapter actually trained)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    lora = config.model.lora_configs[0]
    settings = lora.model_dump(mode="json")
    if lora.path:
        peft_model = PeftModel.from_pretrained(model, lora.path, is_trainable=True)
        loaded = peft_model.peft_config["default"]
        given = {k: getattr(lora, k) for k in ("lora_rank", "lora_alpha") if lora.is_set(k)}
        found = {"lora_rank": loaded.r, "lora_alpha": loaded.lora_alpha}
        if any(found[k] != v for k, v in given.items()):
            raise ValueError(f"model.lora_configs.0.path: the adapter in {lora.path} has {found}, the config says {given}")
        targets = loaded.target_modules
        settings.update(found, target_modules=sorted(targets) if isinstance(targets, (set, list)) else targets)
    else:
        peft_model = get_peft_model(
            model,
            LoraConfig(
                r=lora.lora_rank,
                lora_alpha=lora.lora_alpha,
                target_modules=lora.target_modules,
                lora_dropout=0.0,
                task_type="CAUSAL_LM",
            ),
        )
    if lora.lora_dtype != "auto":  # the adapter's own dtype; peft casts its inputs to it
        dtype = _DTYPES[lora.lora_dtype]
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.data = param.data.to(dtype)
    return peft_model, settings


def _pick_device(setting: str) -> torch.device:
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def _rng_state() -> dict:
    """Tensors, numbers and strings only: the file loads with torch.load(weights_only=True)."""
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, gauss),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    kind, key, pos, has_gauss, gauss = state["numpy"]
    key = key.numpy() if isinstance(key, torch.Tensor) else key  # older checkpoints hold the ndarray
    np.random.set_state((kind, key.astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
