"""vLLM rollout engines: Ray actors that each own one `vllm.LLM`, and their lifecycle helpers.

Engines are named, detached actors (`{experiment_id}-rollout-{i}`, see `backends.local.policy`): Prefect
tasks reach them through the policy, never through handles, and a retried flow finds the engines it
started. On a cluster with GPUs each actor asks Ray for `tensor_parallel_size` GPUs; without GPUs the
same actor runs vLLM's CPU build with the threads the policy gives it.

Each engine serves its model from a folder of its own (/dev/shm/rft/<engine>/: tokenizer and config
symlinked, weights linked or copied) so that a weight sync can replace the safetensors there and ask
vLLM to reload them (see `backends.local.weight_sync`).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from backends.cpu_time import process_tree_cpu_s
from backends.history import CallRecord
from backends.local import capacity, ray_cluster, worker_extension
from backends.local.engine_loop import EngineLoop, generate_on_loop
from backends.local.openai_server import OpenAIServer, ServerSettings
from backends.local.request_limits import Limits
from backends.local.weight_sync import SHM_ROOT, WeightTransport, after_new_weights, make_transport
from backends.rollout import RolloutEngine, Sample, SamplingSettings, TokenIds, TopScores
from backends.weights import WeightsHandle
from checkpointing.models import local_model_folder, origin_id, resolve_model_path
from schemas.secrets import openai_api_key

logger = logging.getLogger(__name__)

# Keep vLLM's per-request INFO lines and progress bars out of the flow logs.
QUIET_ENV = {
    "VLLM_LOGGING_LEVEL": "WARNING",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_DEDUP_LOGS": "1",
}
# Calls an engine actor serves at once: at least the workflows an evaluation runs (tasks.evaluate.EVAL_BATCH); more
# wait in Ray's queue.
ENGINE_CONCURRENCY = 128
# The smallest KV block vLLM's CPU attention takes (a multiple of 32): see VLLMEngine._cpu_cache_kwargs.
CPU_PREFIX_BLOCK = 32


@dataclass
class EngineSettings:
    """Plain values an engine actor is built from (pydantic configs stay on the driver side)."""

    model_path: str  # the folder, as the driver resolved model_id on its machine
    max_model_len: int
    model_id: str = ""  # the setting (model.model_path): resolved again on a node that lacks the folder
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.3
    kv_cache_memory_bytes: int | None = None
    dtype: str = "auto"
    seed: int = 42
    enforce_eager: bool = True
    enable_prefix_caching: bool = False
    enable_chunked_prefill: bool = True
    sync_method: str = "checkpoint"
    sleeps_while_training: bool = False  # mode colocate: give the device back while the trainer steps (sleep)
    shm_dir: str = ""  # the experiment's RAM-backed folder (weight_sync.shm_dir); "" : SHM_ROOT itself
    show_progress: bool = False  # vLLM's progress bar on each batch call: for scripts a person watches, not runs
    # The OpenAI-compatible endpoint (backends.local.openai_server), when enable_openai_api.
    enable_openai_api: bool = False
    enable_history: bool = False
    openai_api_host: str = "127.0.0.1"
    openai_api_port: int = 0  # 0: any free port; else engine i listens on port + i
    openai_api_key: str | None = field(default=None, repr=False)  # read from its secret on the driver, never logged
    openai_max_concurrent_requests: int = 256
    openai_max_request_bytes: int = 4 * 2**20
    openai_max_tokens: int = 1024
    served_model_names: tuple[str, ...] = ("policy",)
    chat_template: str | None = None
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None

    @classmethod
    def from_config(cls, config: Any, model_dir: str | None = None) -> EngineSettings:
        """From an `ExperimentConfig`: explorer.rollout_model and model sections, and the schedule's sync method."""
        from backends.schedule import Schedule  # in the driver only: an engine's process never needs the schemas

        folder = model_dir or str(resolve_model_path(config.model.model_path))
        return cls._of(config.explorer.rollout_model, config, folder, Schedule.of(config).method,
                       (config.model.model_path, "policy"), origin_id(folder, config.model.model_path))

    @classmethod
    def for_auxiliary(cls, config: Any, index: int) -> EngineSettings:
        """Auxiliary model `index` (explorer.auxiliary_models): its own model, never synced. One token more
        than the policy's context, so that it can score a whole rollout (prompt and response) as a prompt."""
        aux = config.explorer.auxiliary_models[index]
        settings = cls._of(aux, config, str(resolve_model_path(aux.model_path)), "checkpoint",
                           (aux.auxiliary_name(), aux.model_path), aux.model_path)
        settings.max_model_len += 1
        return settings

    @classmethod
    def _of(cls, rollout: Any, config: Any, model_path: str, sync_method: str, names: tuple[str, ...],
            model_id: str) -> EngineSettings:
        from backends.schedule import Schedule

        model = config.model
        max_model_len = model.max_model_len or (model.max_prompt_tokens + model.max_response_tokens)
        key_source = rollout.openai_api_key_secret  # where the endpoint's key is kept; loaded only with the endpoint on
        return cls(
            model_path=model_path,
            model_id=model_id,
            max_model_len=int(max_model_len),
            tensor_parallel_size=rollout.tensor_parallel_size,
            gpu_memory_utilization=rollout.gpu_memory_utilization,
            kv_cache_memory_bytes=int(rollout.kv_cache_memory_gb * 2**30) if rollout.kv_cache_memory_gb else None,
            dtype=rollout.dtype,
            seed=rollout.seed,
            enforce_eager=rollout.enforce_eager,
            enable_prefix_caching=rollout.enable_prefix_caching,
            enable_chunked_prefill=rollout.enable_chunked_prefill,
            sync_method=sync_method,
            sleeps_while_training=Schedule.of(config).shares_devices,
            enable_openai_api=rollout.enable_openai_api,
            enable_history=rollout.enable_history,
            openai_api_host=rollout.openai_api_host,
            openai_api_port=rollout.openai_api_port,
            openai_api_key=openai_api_key(key_source) if rollout.enable_openai_api else None,
            openai_max_concurrent_requests=rollout.openai_max_concurrent_requests,
            openai_max_request_bytes=rollout.openai_max_request_bytes,
            openai_max_tokens=int(rollout.openai_max_tokens or model.max_response_tokens),
            served_model_names=names,
            chat_template=model.custom_chat_template,
            enable_auto_tool_choice=rollout.enable_auto_tool_choice,
            tool_call_parser=rollout.tool_call_parser,
            reasoning_parser=rollout.reasoning_parser,
        )


def _link_model_folder(source: Path, serve_dir: Path) -> None:
    """A private view of an HF folder, every file symlinked.

    A sync later renames new safetensors over the weight symlinks (replacing the link, never the
    base model's file), so the start costs no copy and the base model stays untouched.
    """
    if serve_dir.exists():
        shutil.rmtree(serve_dir)
    serve_dir.mkdir(parents=True)
    for item in source.iterdir():
        if item.is_file():
            os.symlink(item.resolve(), serve_dir / item.name)


class VLLMEngine(RolloutEngine):
    """Owns one `vllm.LLM`; instantiated by Ray as an actor (see `start_engines`)."""

    def __init__(self, name: str, settings: dict[str, Any]) -> None:
        import torch
        from vllm import LLM

        self.name = name
        self.settings = EngineSettings(**settings)
        self.use_gpu = torch.cuda.is_available()
        self.transport: WeightTransport = make_transport(
            self.settings.sync_method, self.use_gpu, self.settings.tensor_parallel_size
        )
        source = local_model_folder(self.settings.model_path, self.settings.model_id)  # on this node
        if not source.is_dir():  # a hub id on a GPU cluster
            from huggingface_hub import snapshot_download

            source = Path(snapshot_download(self.settings.model_path))
        self.serve_dir = Path(self.settings.shm_dir or SHM_ROOT) / name
        _link_model_folder(source, self.serve_dir)

        start = time.perf_counter()
        self.llm = LLM(
            model=str(self.serve_dir),
            tensor_parallel_size=self.settings.tensor_parallel_size,
            gpu_memory_utilization=self.settings.gpu_memory_utilization,
            kv_cache_memory_bytes=self.settings.kv_cache_memory_bytes,
            dtype=self.settings.dtype,
            seed=self.settings.seed,
            enforce_eager=self.settings.enforce_eager,
            enable_prefix_caching=self.settings.enable_prefix_caching,
            enable_chunked_prefill=self.settings.enable_chunked_prefill,
            max_model_len=self.settings.max_model_len,
            # Logprobs of the distribution actually sampled from (after temperature / top-k / top-p),
            # which is what the trainer recomputes (it divides its logits by the temperature).
            logprobs_mode="processed_logprobs",
            # the worker methods our syncs call by name (a function cannot cross into a separate engine core)
            worker_extension_cls=worker_extension.QUALNAME,
            **self._executor_kwargs(),
            **self._cpu_cache_kwargs(),
            **self.transport.llm_kwargs(),
            **({"enable_sleep_mode": True} if self._frees_memory_asleep else {}),
        )
        self.start_seconds = time.perf_counter() - start
        self._version = 0
        self.asleep, self.sleeps, self.wakes = False, 0, 0
        # Every use of the engine from here on goes through this thread: calls from many workflows are
        # batched continuously, and each returns when its own requests are done.
        self.loop = EngineLoop(self.llm)
        self.loop.before_command = self._wake
        self.server: OpenAIServer | None = None
        if self.settings.enable_openai_api:
            self.server = self._start_server()

    # --- RolloutEngine -------------------------------------------------------------------------

    def generate(self, prompts: list[TokenIds], sampling: SamplingSettings) -> list[list[Sample]]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_tokens=sampling.max_tokens,
            min_tokens=sampling.min_tokens,
            seed=sampling.seed,
            stop_token_ids=list(sampling.stop_token_ids) or None,
            logprobs=0,  # the sampled token's own logprob only
        )
        outputs = self._run([list(ids) for ids in prompts], params)
        results: list[list[Sample]] = []
        for ids, request in zip(prompts, outputs, strict=True):
            samples = []
            for completion in request.outputs:
                tokens = list(completion.token_ids)
                logprobs = [step[token].logprob for token, step in zip(tokens, completion.logprobs or [])]
                if len(logprobs) != len(tokens):
                    raise RuntimeError(f"{self.name}: vLLM returned {len(logprobs)} logprobs for {len(tokens)} tokens")
                samples.append(Sample(list(ids), tokens, logprobs, str(completion.finish_reason), completion.text))
            results.append(samples)
        return results

    def score(self, sequences: list[TokenIds], starts: list[int], k: int = 0) -> list[TopScores]:
        from vllm import SamplingParams

        # One token is generated and thrown away: vLLM returns prompt log-probs only with a request to sample.
        # Each position's entries are its k likeliest tokens and the given one (ranked, 1 = likeliest).
        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=k, detokenize=False)
        prompts = [list(ids) for ids in sequences]
        outputs = self._run(prompts, params)
        scored = []
        for ids, start, request in zip(prompts, starts, outputs, strict=True):
            steps = request.prompt_logprobs or []
            if len(steps) != len(ids) or not 0 < start <= len(ids):
                raise RuntimeError(f"{self.name}: {len(steps)} prompt log-probs for {len(ids)} tokens (from {start})")
            tops = [sorted(steps[i].items(), key=lambda item: item[1].rank)[:k] for i in range(start, len(ids))]
            scored.append(TopScores([steps[i][ids[i]].logprob for i in range(start, len(ids))],
                                    [[token for token, _ in top] for top in tops],
                                    [[entry.logprob for _, entry in top] for top in tops]))
        return scored

    def load_weights(self, weights: WeightsHandle) -> float:
        start = time.perf_counter()
        if weights.kind == "folder":
            self._on_engine(lambda: self.transport.apply(self.llm, self.serve_dir, Path(weights.location)))
        elif weights.kind == "pushed":  # the trainer streamed the tensors in already (GPU)
            self._on_engine(lambda: self.llm.update_weight_version(str(weights.version)))
        else:
            raise ValueError(f"{self.name}: a vLLM engine cannot load {weights.kind!r} weights ({weights.location})")
        self._version = weights.version
        return time.perf_counter() - start

    def model_version(self) -> int:
        return self._version

    # --- taking turns with the trainer on one device (mode colocate) ----------------------------

    @property
    def _frees_memory_asleep(self) -> bool:
        """vLLM's sleep mode gives the GPU memory back (weights to host RAM, the KV cache dropped); its CPU build has
        none, so on CPU a sleep is only a turn taken (counted in `info`)."""
        return self.settings.sleeps_while_training and self.use_gpu

    def sleep(self) -> None:
        """The trainer steps next on this engine's device: free it (vLLM's level 1). The engine wakes before its next
        command, whoever sends it (backends.local.engine_loop)."""
        self._on_engine(self._sleep_now)

    def _sleep_now(self) -> None:
        """On the loop thread; asleep already (a log-prob pass, then the step): nothing more to free."""
        if self._frees_memory_asleep and not self.asleep:
            self.llm.sleep(level=1)
        self.asleep = True
        self.sleeps += 1

    def _wake(self, command: Any) -> None:
        """On the loop thread, before any command but a sleep: back from sleep, the weights and KV cache on the device
        again."""
        if self.asleep and command != self._sleep_now:
            if self._frees_memory_asleep:
                self.llm.wake_up()
            self.asleep = False
            self.wakes += 1

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model_path": self.settings.model_path,
            "serve_dir": str(self.serve_dir),
            "device": "cuda" if self.use_gpu else "cpu",
            "dtype": str(self.llm.llm_engine.model_config.dtype).removeprefix("torch."),
            "block_size": self.llm.llm_engine.vllm_config.cache_config.block_size,
            "tensor_parallel_size": self.settings.tensor_parallel_size,
            "sync_method": self.transport.sync_method,
            "start_seconds": round(self.start_seconds, 2),
            "omp_threads": os.environ.get("OMP_NUM_THREADS"),
            "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
            "openai_base_url": self.openai_base_url(),
            "sleeps": self.sleeps,
            "wakes": self.wakes,
            "asleep": self.asleep,
        }

    def cpu_seconds(self) -> float:
        return process_tree_cpu_s()  # with vLLM's engine-core and tensor-parallel worker processes (GPU)

    def openai_base_url(self) -> str | None:
        return self.server.base_url if self.server is not None else None

    def openai_api_key(self) -> str:
        """What the pipeline's own clients (agent workflows) send as api_key: the key, or "EMPTY" without one."""
        return self.settings.openai_api_key or "EMPTY"

    def call_history(self, rollout_id: str, pop: bool = True) -> list[CallRecord]:
        if self.server is None or self.server.history is None:
            raise RuntimeError(
                f"{self.name} records no calls: set explorer.rollout_model.enable_openai_api and enable_history"
            )
        return self.server.history.get(rollout_id, pop=pop)

    # --- helpers -------------------------------------------------------------------------------

    def ready(self) -> dict[str, Any]:
        return self.info()

    def _start_server(self) -> OpenAIServer:
        """vLLM's OpenAI server on this engine (see backends.local.openai_server)."""
        s = self.settings
        server = OpenAIServer(
            self.llm,
            self.loop,
            ServerSettings(
                host=s.openai_api_host, port=s.openai_api_port, served_model_names=tuple(s.served_model_names),
                chat_template=s.chat_template, enable_auto_tool_choice=s.enable_auto_tool_choice,
                tool_call_parser=s.tool_call_parser, reasoning_parser=s.reasoning_parser, api_key=s.openai_api_key,
                limits=Limits(s.openai_max_concurrent_requests, s.openai_max_request_bytes, s.openai_max_tokens),
            ),
            record=s.enable_history,
            version=self.model_version,
        )
        logger.info("%s: OpenAI-compatible endpoint at %s", self.name, server.start())
        return server

    def _run(self, prompts: list[TokenIds], params: Any) -> list[Any]:
        """vLLM's outputs for token-id prompts, through the engine loop (scheduled with every other caller's)."""
        from vllm import TokensPrompt

        if self.settings.show_progress:  # vLLM's own bar: a script a person watches, the only caller
            return self.loop.call(lambda: self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts],
                                                            params, use_tqdm=True))
        return generate_on_loop(self.loop, self.llm, prompts, params)

    def _on_engine(self, fn: Any) -> Any:
        """Run engine work between two engine steps, on the loop's thread."""
        return self.loop.call(fn)

    def _executor_kwargs(self) -> dict[str, Any]:
        """On CPU with one rank, the worker runs inside this process (with
        VLLM_ENABLE_V1_MULTIPROCESSING=0 from cpu_engine_env): measured on 2 cores, the engine starts
        in ~8 s instead of ~41 s and samples faster (no busy-polling engine-core process)."""
        if self.use_gpu or self.settings.tensor_parallel_size > 1:
            return {}
        return {"distributed_executor_backend": "uni"}

    def _cpu_cache_kwargs(self) -> dict[str, Any]:
        """On CPU, KV blocks of CPU_PREFIX_BLOCK tokens instead of vLLM's 128 there.

        The prefix cache reuses whole blocks only, and a 128-token block is longer than most RL prompts
        (a system prompt and a question: ~60 tokens on arith), so no prompt ever hit it; an `n`-sample
        request prefilled its prompt `n` times. With 32-token blocks the shared system prompt is cached:
        on the 2-core machine a round of 16 tasks × 8 samples took 0.69 of the time and a 300-prompt greedy
        evaluation 0.77 (benchmarks/prefix_blocks.py, benchmarks/measured/prefix_blocks.json).
        """
        if self.use_gpu or not self.settings.enable_prefix_caching:
            return {}
        return {"block_size": CPU_PREFIX_BLOCK}

    def shutdown(self) -> None:
        """Stop vLLM's engine-core process and free the serve folder; the caller kills the actor next.

        Without this the engine core (a child process) outlives `ray.kill` for a while, still busy.
        """
        if self.server is not None:
            self.server.stop()
        self.loop.stop()
        self.llm.llm_engine.engine_core.shutdown(timeout=10)
        shutil.rmtree(self.serve_dir, ignore_errors=True)

    # --- vLLM weight-transfer API, driven by vLLM's RayVLLMWeightSyncClient on GPU -------------

    def init_weight_transfer_engine(self, request: Any) -> None:
        self._on_engine(lambda: self.llm.init_weight_transfer_engine(request))

    def start_weight_update(self) -> None:
        self._on_engine(self.llm.start_weight_update)

    def update_weights(self, request: Any) -> None:
        self._on_engine(lambda: self.llm.update_weights(request))

    def finish_weight_update(self) -> None:
        self._on_engine(self.llm.finish_weight_update)
        self._on_engine(lambda: after_new_weights(self.llm))


# --- lifecycle ---------------------------------------------------------------------------------


def start_engine_actors(
    settings: EngineSettings, names: list[str], threads: int | None, gpus: int, spread: bool = False
) -> None:
    """Start (or find, after a retry) the named engines and wait until they answer.

    `gpus` per engine (0 on CPU); `threads`: OMP threads of a CPU engine (Ray pins actors to one);
    `spread`: place the engines on different nodes where the cluster has several (Ray's SPREAD).
    """
    import ray

    env = dict(QUIET_ENV)
    options: dict[str, Any] = {"num_cpus": 1}  # one CPU of Ray's bookkeeping per engine
    if spread:
        options["scheduling_strategy"] = "SPREAD"
    if gpus:
        options["num_gpus"] = gpus
    if not gpus or not capacity.gpus_compute():  # placeholder GPUs (capacity.gpus_compute): vLLM's CPU build
        env.update(cpu_engine_env(threads))
    # Calls overlap: every use of the engine goes through its engine loop, which batches the generate calls of
    # many workflows (and an episode's recorded calls are read while another's batch samples).
    options["max_concurrency"] = ENGINE_CONCURRENCY
    new = [name for name in names if not ray_cluster.has_actor(name)]  # a retried flow finds the others running
    capacity.require_gpus("explorer.rollout_model.engine_num", f"{len(new)} vLLM engine(s)", gpus, len(new))
    actor_cls = ray.remote(VLLMEngine)
    handles = [
        actor_cls.options(
            name=name,
            namespace=ray_cluster.NAMESPACE,
            lifetime="detached",
            get_if_exists=True,  # a retried flow reuses the running engine
            runtime_env={"env_vars": env},
            **options,
        ).remote(name, {**asdict(settings), "openai_api_port": settings.openai_api_port + i if settings.openai_api_port else 0})
        for i, name in enumerate(names)
    ]
    capacity.wait_started([h.ready.remote() for h in handles], f"vLLM engine(s) {', '.join(names)}",
                          f"{gpus} GPU(s) each" if gpus else f"1 CPU and {threads or 'all'} thread(s) each",
                          on_timeout=lambda: [ray.kill(h, no_restart=True) for h in handles])


def cpu_engine_env(threads: int | None) -> dict[str, str]:
    """Threads for vLLM's CPU worker; a user's own OMP_NUM_THREADS / VLLM_* variables win.

    The engine core runs in the actor's own process (no busy-polling sibling process on few cores),
    and there vLLM binds no threads itself (its VLLM_CPU_OMP_THREADS_BIND applies to its
    multiprocessing executor only): torch uses OMP_NUM_THREADS, which Ray sets to 1 in every actor.
    Measured on the 2-core machine, 8x128 sampling: 1 thread 68-76 tok/s, 2 threads 87-103 tok/s.
    """
    env = {
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads or os.cpu_count() or 1)),
        "VLLM_ENABLE_V1_MULTIPROCESSING": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0"),
    }
    for name in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def stop_engine_actor(name: str, serve_root: Path = SHM_ROOT) -> None:
    """Stop one engine (vLLM's engine core first, then the actor) and free its serve folder (under
    `serve_root`: the experiment's shm_dir where the policy started it)."""
    import ray

    try:
        handle = ray_cluster.get_actor(name)
    except LookupError:
        return
    try:
        ray.get(handle.shutdown.remote(), timeout=30)
    except Exception:  # a dead or stuck engine: kill it anyway
        logger.warning("engine %s did not shut down cleanly; killing it", name)
    ray.kill(handle, no_restart=True)
    shutil.rmtree(serve_root / name, ignore_errors=True)
