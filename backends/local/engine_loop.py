"""The thread that owns a rollout engine's in-process `vllm.LLM`: every use of the engine goes through it.

vLLM's `LLM.generate` returns when the last of its prompts is done, and the engine takes one such call at a
time, so a call waits for every sequence of the one before it. The loop instead adds each caller's requests as
they come, steps the engine while any are unfinished and hands each request its output as soon as it is done:
calls from many threads (workflows, the OpenAI server's HTTP requests) are batched continuously, as in vLLM's
`AsyncLLM`, without its separate busy-polling engine-core process. Other engine work (a weight load) runs
between two steps.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

logger = logging.getLogger(__name__)

Sink = Callable[[Any], None]  # receives RequestOutputs of one request, or the exception that ended it


class EngineLoop:
    """The only thread that touches the engine once the server is up."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.engine = llm.llm_engine
        self._commands: queue.SimpleQueue[tuple[Callable[[], Any], Sink | None, Future] | None] = queue.SimpleQueue()
        self._sinks: dict[str, Sink] = {}
        self._error: BaseException | None = None
        # On the loop thread before each command: the engine wakes from the sleep it was put to while the trainer
        # stepped (mode colocate), whatever the command (a sampling call, the OpenAI server's, a weight load).
        # It gets the command, so that a command which needs the engine asleep can be told apart.
        self.before_command: Callable[[Callable[[], Any]], None] | None = None
        self._thread = threading.Thread(target=self._run, name="vllm-engine-loop", daemon=True)
        self._thread.start()

    # -- from any thread -------------------------------------------------------------------------

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the loop thread between two engine steps; blocks until it returned."""
        return self.submit(fn).result()

    def submit(self, fn: Callable[[], Any], sink: Sink | None = None) -> Future:
        """Run `fn` on the loop thread; when `sink` is given, `fn` adds requests and returns their ids,
        and every output of those requests goes to `sink` (registered before the next step)."""
        if self._error is not None:
            raise RuntimeError("the vLLM engine loop has stopped") from self._error
        done: Future = Future()
        self._commands.put((fn, sink, done))
        return done

    def abort(self, request_ids: list[str]) -> None:
        def drop() -> None:
            for rid in request_ids:
                self._sinks.pop(rid, None)
            self.engine.abort_request(request_ids)

        self.submit(drop)

    def stop(self, timeout: float = 30) -> None:
        self._commands.put(None)
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self._error is None

    # -- the loop thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                if not self._take_commands(block=not self.engine.has_unfinished_requests()):
                    return
                if self.engine.has_unfinished_requests():
                    self._step()
        except BaseException as err:  # the engine is unusable: fail everything waiting on it
            logger.exception("vLLM engine loop failed")
            self._error = err
            self._fail_all(err)

    def _take_commands(self, block: bool) -> bool:
        """Run queued commands (waiting for one when the engine is idle); False when asked to stop."""
        while True:
            try:
                command = self._commands.get() if block else self._commands.get_nowait()
            except queue.Empty:
                return True
            if command is None:
                self._fail_all(RuntimeError("the vLLM engine loop was stopped"))
                return False
            fn, sink, done = command
            try:
                if self.before_command is not None:
                    self.before_command(fn)
                result = fn()
                if sink is not None:
                    for rid in result:
                        self._sinks[rid] = sink
                done.set_result(result)
            except BaseException as err:
                done.set_exception(err)
            block = False

    def _step(self) -> None:
        for output in self.engine.step():
            sink = self._sinks.pop(output.request_id, None) if output.finished else self._sinks.get(output.request_id)
            if sink is not None:
                sink(output)

    def _fail_all(self, err: BaseException) -> None:
        sinks, self._sinks = self._sinks, {}
        for sink in set(sinks.values()):
            sink(err)
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if command is not None:
                command[2].set_exception(err)


_BATCH_IDS = itertools.count()


def generate_on_loop(loop: EngineLoop, llm: Any, prompts: list[list[int]], params: Any) -> list[Any]:
    """What `LLM.generate` does, through the loop: each token prompt rendered the way vLLM's docs show
    (`render_cmpl`), added with FINAL_ONLY outputs; finished outputs in prompt order."""
    from vllm.renderers.inputs.preprocess import parse_model_prompt
    from vllm.sampling_params import RequestOutputKind

    params.output_kind = RequestOutputKind.FINAL_ONLY
    ids = [f"batch-{next(_BATCH_IDS)}" for _ in prompts]
    finished: dict[str, Any] = {}
    done = threading.Event()
    failure: list[BaseException] = []

    def sink(item: Any) -> None:  # on the loop thread
        if isinstance(item, BaseException):
            failure.append(item)
            done.set()
            return
        finished[item.request_id] = item
        if len(finished) == len(ids):
            done.set()

    def add() -> list[str]:
        engine = llm.llm_engine
        renderer, tok_params = engine.renderer, engine.renderer.default_cmpl_tok_params
        added: list[str] = []
        try:
            for rid, token_ids in zip(ids, prompts, strict=True):
                parsed = parse_model_prompt(engine.model_config, {"prompt_token_ids": list(token_ids)})
                (engine_input,) = renderer.render_cmpl([parsed], tok_params)
                engine.add_request(rid, engine_input, params)
                added.append(rid)
        except BaseException:
            if added:
                engine.abort_request(added)
            raise
        return added

    loop.submit(add, sink).result()
    done.wait()
    if failure:
        raise failure[0]
    return [finished[rid] for rid in ids]
