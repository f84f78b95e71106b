"""The Tinker sampler behind `RolloutEngine`: token ids in, `repeat_times` samples with per-token logprobs out.

It samples the version it was last given (`load_weights`), as a tinker:// path:
- sampler weights (save_weights_for_sampler): a SamplingClient made from the path;
- a training state (save_state, tinker://…/weights/…): loaded into this engine's own *replica* — a
  training client that never trains — whose sampler weights are then sampled. The local server keeps a
  sampling client's weights in its training model's LoRA slot (no snapshot), so sampling an older
  version there would put that version back into the trainer; the replica's slot is the explorer's alone.
Before any version is loaded it samples the base model (or, for a stage after a Tinker stage, the
state that stage ended with).

Fixed shapes for the local JAX server: one request per prompt with num_samples = n, the same
max_tokens and stop tokens for a taskset; the server pads sampling batches (sample_max_num_sequences).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from pathlib import Path
from typing import Any

from backends.rollout import RolloutEngine, Sample, SamplingSettings, TokenIds
from backends.tinker.connection import Endpoint, ServerInfo, service_client, unload_model, wait
from backends.weights import WeightsHandle

logger = logging.getLogger(__name__)


def is_state_path(path: str) -> bool:
    """tinker://RUN/weights/NAME is a training state (save_state); other paths are sampler weights."""
    return path.startswith("tinker://") and "/weights/" in path and "/sampler_weights/" not in path


def stop_tokens(model_dir: str | Path) -> list[int]:
    """The model's end tokens (generation config and tokenizer), which vLLM stops at by default."""
    folder = Path(model_dir)
    ids: set[int] = set()
    for name, key in (("generation_config.json", "eos_token_id"), ("config.json", "eos_token_id")):
        file = folder / name
        if file.is_file():
            value = json.loads(file.read_text()).get(key)
            ids.update(value if isinstance(value, list) else [value] if isinstance(value, int) else [])
    if not ids:
        from transformers import AutoTokenizer

        eos = AutoTokenizer.from_pretrained(folder).eos_token_id
        ids.update([eos] if eos is not None else [])
    return sorted(ids)


class TinkerEngine(RolloutEngine):
    def __init__(self, name: str, ep: Endpoint, info: ServerInfo, base_model: str, model_dir: str,
                 seed: int = 42, initial: WeightsHandle | None = None) -> None:
        self.name, self.ep, self.server, self.base_model = name, ep, info, base_model
        self.service = service_client(ep)  # a session of its own: the explorer's side ends apart from the trainer's
        self.stop = stop_tokens(model_dir)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._version = 0
        self._location = f"base model {base_model}"
        self._replica: Any = None
        self._sampler: Any = None
        if initial is not None:
            self.load_weights(initial)

    # -- RolloutEngine -------------------------------------------------------------------------

    def generate(self, prompts: list[TokenIds], sampling: SamplingSettings) -> list[list[Sample]]:
        from tinker import types

        sampler = self._current()
        params = [
            types.SamplingParams(
                max_tokens=sampling.max_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
                top_k=sampling.top_k, seed=sampling.seed if sampling.seed is not None else self._rng.getrandbits(30),
                stop=sorted(set(self.stop) | set(sampling.stop_token_ids)),
            )
            for _ in prompts
        ]
        futures = [sampler.sample(prompt=types.ModelInput.from_ints(list(ids)), num_samples=sampling.n, sampling_params=p)
                   for ids, p in zip(prompts, params, strict=True)]
        results = []
        for ids, future in zip(prompts, futures, strict=True):
            response = wait(future, f"{self.name}: sample {sampling.n} × {sampling.max_tokens} tokens", self.ep)
            samples = []
            for seq in response.sequences:
                tokens = [int(t) for t in seq.tokens]
                logprobs = [float(x) for x in (seq.logprobs or [])]
                if len(logprobs) != len(tokens):
                    raise RuntimeError(f"{self.name}: Tinker returned {len(logprobs)} logprobs for {len(tokens)} tokens")
                samples.append(Sample(list(ids), tokens, logprobs, "stop" if seq.stop_reason == "stop" else "length"))
            results.append(samples)
        return results

    def load_weights(self, weights: WeightsHandle) -> float:
        if weights.kind != "tinker":
            raise ValueError(f"{self.name}: the Tinker sampler loads tinker:// weights, not {weights.kind!r} ({weights.location})")
        started = time.perf_counter()
        with self._lock:
            path = weights.location
            if is_state_path(path):
                self._sampler = self._replica_sampler(path)
            else:
                self._sampler = wait(self.service.create_sampling_client(model_path=path),
                                     f"{self.name}: sampling client of {path}", self.ep)
            self._version, self._location = weights.version, path
        return time.perf_counter() - started

    def model_version(self) -> int:
        return self._version

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "base_model": self.base_model, "serving": self._location, "server": self.ep.base_url,
                "device": "tinker", "sampler_replica": self._replica is not None, "server_kind": self.server.kind}

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        if self._replica is not None:
            unload_model(self.ep, str(self._replica.model_id))
            self._replica = None
        try:
            self.service.close("success").result(timeout=30)
        except Exception:  # noqa: BLE001  (a server that is gone frees its slots itself)
            pass

    # -- internals -----------------------------------------------------------------------------

    def _current(self) -> Any:
        with self._lock:
            if self._sampler is None:  # the base model: a snapshot on every server (no LoRA slot involved)
                self._sampler = wait(self.service.create_sampling_client(base_model=self.base_model),
                                     f"{self.name}: sampling client of {self.base_model}", self.ep)
            return self._sampler

    def _replica_sampler(self, state_path: str) -> Any:
        if self._replica is None:
            self._replica = wait(self.service.create_training_client_from_state(state_path),
                                 f"{self.name}: sampler replica from {state_path}", self.ep)
        else:
            wait(self._replica.load_state(state_path), f"{self.name}: load {state_path} into the sampler replica", self.ep)
        return wait(self._replica.save_weights_and_get_sampling_client(), f"{self.name}: replica sampling client", self.ep)
