"""vLLM's own OpenAI-compatible server on a rollout engine's in-process `vllm.LLM`.

vLLM's server (`vllm.entrypoints.launchers`: `build_app` + `init_app_state`, the chat, completion and
responses serving classes, the tool-call parsers) talks to an `EngineClient`, which vLLM implements as
`AsyncLLM` — always with its engine core in a separate, busy-polling process. On a few CPU cores that
process costs ~30 s of start-up and sampling speed (see `vllm_engine._executor_kwargs`), so the engine
stays the in-process `LLM`, owned by its `EngineLoop` (backends.local.engine_loop), and this module gives
vLLM's server an `EngineClient` over that loop; the engine's batch calls and the HTTP requests share it:

    InprocEngineClient  vLLM's `EngineClient` on the loop: `generate` is an async generator fed from
                      the loop thread; every finished call is recorded (prompt and response token ids,
                      logprobs) in a `backends.history.CallHistory` under the request's rollout id;
                      a chat that writes an earlier answer of its rollout back continues from that
                      answer's sampled tokens, not the template's re-rendering (`continue_sampled`).
    OpenAIServer      the FastAPI app vLLM builds, with `RolloutIdMiddleware` in front, served by
                      uvicorn on a thread of the actor.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from argparse import Namespace
from collections.abc import AsyncGenerator, Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from backends.history import CallHistory, CallRecord, RolloutIdMiddleware, continue_sampled, current_rollout_id
from backends.local.engine_loop import EngineLoop
from backends.local.request_limits import Limits, RequestLimits

logger = logging.getLogger(__name__)


class _Accumulator:
    """Token ids and logprobs of each choice of one request, whatever the output kind (delta or not)."""

    def __init__(self, delta: bool) -> None:
        self.delta = delta
        self.tokens: dict[int, list[int]] = {}
        self.logprobs: dict[int, list[float]] = {}
        self.finish: dict[int, str] = {}
        self.text: dict[int, str] = {}
        self.prompt_token_ids: list[int] = []

    def add(self, output: Any) -> None:
        if output.prompt_token_ids:
            self.prompt_token_ids = list(output.prompt_token_ids)
        for choice in output.outputs:
            tokens = list(choice.token_ids)
            logprobs = [step[t].logprob for t, step in zip(tokens, choice.logprobs or [])]
            if self.delta:
                self.tokens.setdefault(choice.index, []).extend(tokens)
                self.logprobs.setdefault(choice.index, []).extend(logprobs)
                self.text[choice.index] = self.text.get(choice.index, "") + (choice.text or "")
            else:
                self.tokens[choice.index], self.logprobs[choice.index] = tokens, logprobs
                self.text[choice.index] = choice.text or ""
            if choice.finish_reason is not None:
                self.finish[choice.index] = str(choice.finish_reason)


def _engine_client_base() -> type:
    from vllm.engine.protocol import EngineClient

    return EngineClient


def make_engine_client(llm: Any, loop: EngineLoop, history: CallHistory | None, version: Callable[[], int]) -> Any:
    """vLLM's `EngineClient` over the loop (built lazily: vLLM is imported inside the actor only)."""

    class InprocEngineClient(_engine_client_base()):  # type: ignore[misc]
        def __init__(self) -> None:
            engine = llm.llm_engine
            self.vllm_config = engine.vllm_config
            self.model_config = engine.model_config
            self.renderer = engine.renderer
            self.input_processor = engine.input_processor
            self.io_processor = getattr(engine, "io_processor", None)

        # -- state ------------------------------------------------------------------------------
        @property
        def is_running(self) -> bool:
            return loop.alive

        @property
        def is_stopped(self) -> bool:
            return not loop.alive

        @property
        def errored(self) -> bool:
            return not loop.alive

        @property
        def dead_error(self) -> BaseException:
            return RuntimeError("the vLLM engine loop of this rollout engine has stopped")

        # -- generation -------------------------------------------------------------------------
        async def generate(
            self,
            prompt: Any,
            sampling_params: Any,
            request_id: str,
            *,
            prompt_text: str | None = None,
            lora_request: Any = None,
            tokenization_kwargs: dict[str, Any] | None = None,
            trace_headers: Any = None,
            priority: int = 0,
            data_parallel_rank: int | None = None,
            session_id: str | None = None,
            reasoning_ended: bool | None = None,
            reasoning_parser_kwargs: dict[str, Any] | None = None,
        ) -> AsyncGenerator[Any, None]:
            from vllm.sampling_params import RequestOutputKind

            rollout_id = current_rollout_id.get()
            if history is not None and sampling_params.logprobs is None:
                sampling_params.logprobs = 0  # the sampled token's own logprob; the response shows none unless asked
            rendered = None
            if history is not None and rollout_id:
                prompt, rendered = self._continue_sampled(rollout_id, prompt, sampling_params)
            aio = asyncio.get_running_loop()
            outputs: asyncio.Queue = asyncio.Queue()

            def sink(item: Any) -> None:
                aio.call_soon_threadsafe(outputs.put_nowait, item)

            def add() -> list[str]:
                engine = llm.llm_engine
                engine.add_request(
                    request_id, prompt, sampling_params, lora_request=lora_request,
                    tokenization_kwargs=tokenization_kwargs, trace_headers=trace_headers, priority=priority,
                    session_id=session_id, prompt_text=prompt_text,
                )
                return [request_id]

            await asyncio.wrap_future(loop.submit(add, sink))
            seen = _Accumulator(delta=sampling_params.output_kind == RequestOutputKind.DELTA)
            finished = False
            try:
                while not finished:
                    item = await outputs.get()
                    if isinstance(item, BaseException):
                        raise item
                    finished = item.finished
                    if history is not None:
                        seen.add(item)
                        if finished:
                            self._record(rollout_id, request_id, seen, sampling_params, rendered)
                    yield item
            except (asyncio.CancelledError, GeneratorExit):
                if not finished and loop.alive:  # the client went away: free the engine of its request
                    loop.abort([request_id])
                raise

        def _continue_sampled(self, rollout_id: str, prompt: Any, params: Any) -> tuple[Any, list[int] | None]:
            """The engine input continuing the rollout's sampled tokens, and the template's ids it
            replaces (None when it stands as rendered)."""
            ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else None
            if not ids or prompt.get("prompt_embeds") is not None:
                return prompt, None
            ids = list(ids)
            tokenizer = llm.get_tokenizer()
            spliced = continue_sampled(ids, history.get(rollout_id, pop=False),  # type: ignore[union-attr]
                                       lambda t: tokenizer.decode(t, skip_special_tokens=False))
            if spliced is None or spliced == ids:
                return prompt, None
            room = self.model_config.max_model_len - len(spliced)
            if room <= 0:
                return prompt, None
            if params.max_tokens is not None and params.max_tokens > room:
                params.max_tokens = room  # the server sized it for the rendered prompt
            # the template's text and offsets describe the rendered ids: dropped with them
            kept = {k: v for k, v in prompt.items() if k not in ("prompt", "prompt_token_offsets")}
            return {**kept, "prompt_token_ids": spliced}, ids

        def _record(self, rollout_id: str, request_id: str, seen: _Accumulator, params: Any,
                    rendered: list[int] | None) -> None:
            for index in sorted(seen.tokens):
                history.record(CallRecord(  # type: ignore[union-attr]
                    rollout_id=rollout_id,
                    prompt_token_ids=seen.prompt_token_ids,
                    response_token_ids=seen.tokens[index],
                    logprobs=seen.logprobs.get(index, []),
                    finish_reason=seen.finish.get(index, "stop"),
                    text=seen.text.get(index, ""),
                    temperature=float(params.temperature),
                    model_version=version(),
                    request_id=request_id,
                    index=index,
                    constrained=getattr(params, "structured_outputs", None) is not None,
                    rendered_prompt_token_ids=rendered,
                ))

        async def encode(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
            raise NotImplementedError("rollout engines serve generation only")
            yield  # pragma: no cover

        async def abort(self, request_id: str | Iterable[str]) -> None:
            loop.abort([request_id] if isinstance(request_id, str) else list(request_id))

        async def notify_kv_transfer_request_rejected(self, *args: Any, **kwargs: Any) -> None:
            return None

        async def get_supported_tasks(self) -> tuple[str, ...]:
            return tuple(llm.llm_engine.get_supported_tasks())

        # -- what the server's housekeeping calls ------------------------------------------------
        async def is_tracing_enabled(self) -> bool:
            return False

        async def do_log_stats(self) -> None:
            return None

        async def check_health(self) -> None:
            if not loop.alive:
                raise self.dead_error

        async def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
            return bool(await asyncio.wrap_future(loop.submit(lambda: llm.reset_prefix_cache())))

        async def reset_mm_cache(self) -> None:
            return None

        async def reset_encoder_cache(self) -> None:
            return None

        async def start_profile(self) -> None:
            raise NotImplementedError

        async def stop_profile(self) -> None:
            raise NotImplementedError

        async def sleep(self, level: int = 1, mode: Any = "abort") -> None:
            raise NotImplementedError("a rollout engine's memory is managed by the pipeline")

        async def wake_up(self, tags: list[str] | None = None) -> None:
            raise NotImplementedError("a rollout engine's memory is managed by the pipeline")

        async def is_sleeping(self) -> bool:
            return False

        async def add_lora(self, lora_request: Any) -> bool:
            return bool(await asyncio.wrap_future(loop.submit(lambda: llm.llm_engine.add_lora(lora_request))))

        async def pause_generation(self, **kwargs: Any) -> None:
            raise NotImplementedError("weights are synchronised by the pipeline, not through the endpoint")

        async def resume_generation(self) -> None:
            return None

        async def is_paused(self) -> bool:
            return False

        def shutdown(self, timeout: float | None = None) -> None:
            return None  # the engine actor owns the engine and stops it

    return InprocEngineClient()


@dataclass
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    served_model_names: tuple[str, ...] = ("policy",)  # the first is the name responses carry
    chat_template: str | None = None  # a Jinja template (the config's model.custom_chat_template)
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    api_key: str | None = field(default=None, repr=False)  # vLLM's --api-key: /v1 needs "Authorization: Bearer <key>"
    limits: Limits | None = None  # backends.local.request_limits


def server_args(model: str, settings: ServerSettings) -> Namespace:
    """vLLM's own server arguments (its CLI parser's defaults), with ours set."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = ["--model", model, "--served-model-name", *settings.served_model_names, "--disable-uvicorn-access-log",
            "--disable-log-stats"]
    if settings.chat_template:
        argv += ["--chat-template", settings.chat_template]
    if settings.enable_auto_tool_choice:
        argv += ["--enable-auto-tool-choice"]
    if settings.tool_call_parser:
        argv += ["--tool-call-parser", settings.tool_call_parser]
    if settings.reasoning_parser:
        argv += ["--reasoning-parser", settings.reasoning_parser]
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    validate_parsed_serve_args(args)
    args.api_key = [settings.api_key] if settings.api_key else None  # set here, never in an argument list
    return args


class OpenAIServer:
    """vLLM's OpenAI app on a uvicorn thread of the engine actor; `base_url` once started."""

    def __init__(self, llm: Any, loop: EngineLoop, settings: ServerSettings, *, record: bool,
                 version: Callable[[], int]) -> None:
        self.llm = llm
        self.settings = settings
        self.history: CallHistory | None = CallHistory() if record else None
        self.loop = loop  # the engine's, which the engine stops
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._version = version
        self.base_url = ""

    def start(self, timeout_s: float = 120) -> str:
        """Bind, build vLLM's app and serve it on a thread with its own event loop; returns the base URL."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.settings.host, self.settings.port))
        host, port = sock.getsockname()[:2]
        built: Future = Future()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve(sock, built)), name="openai-server",
                                        daemon=True)
        self._thread.start()
        built.result(timeout=timeout_s)  # vLLM's app state failed to build: raise its error here
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the OpenAI server on {host}:{port} did not start")
            time.sleep(0.05)
        self.base_url = f"http://{_reachable(host)}:{port}/v1"
        return self.base_url

    async def _serve(self, sock: socket.socket, built: Future) -> None:
        import uvicorn
        from vllm.entrypoints.launchers.api_server.app_state import init_app_state
        from vllm.entrypoints.launchers.app import build_app

        try:
            client = make_engine_client(self.llm, self.loop, self.history, self._version)
            args = server_args(self.llm.llm_engine.model_config.model, self.settings)
            tasks = await client.get_supported_tasks()
            app = build_app(args, tasks, client.model_config)
            await init_app_state(client, app.state, args, tasks)
            served = RequestLimits(app, self.settings.limits) if self.settings.limits else app
            config = uvicorn.Config(RolloutIdMiddleware(served), log_level="warning", access_log=False,
                                    timeout_keep_alive=30)
            self._server = uvicorn.Server(config)
        except BaseException as err:
            built.set_exception(err)
            sock.close()
            return
        built.set_result(True)
        try:
            await self._server.serve(sockets=[sock])
        finally:
            sock.close()

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)


def _reachable(host: str) -> str:
    """The address clients use: a wildcard bind is reached through this node's own address."""
    if host in ("0.0.0.0", "::", ""):
        try:
            import ray

            return ray.util.get_node_ip_address()
        except Exception:
            return socket.gethostbyname(socket.gethostname())
    return host
