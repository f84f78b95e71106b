"""Methods the pipeline adds to vLLM's workers (vLLM's `worker_extension_cls`), called by name.

On a GPU, and on CPU with VLLM_ENABLE_V1_MULTIPROCESSING=1, the engine core is a process of its own and vLLM
serialises every call into it with msgpack, which refuses a Python function (vllm/v1/serial_utils.py). A method
named here crosses as a string. This module is imported inside vLLM's worker process: it imports nothing heavy.
"""

from __future__ import annotations

from typing import Any

# The qualified name vllm.LLM(worker_extension_cls=...) takes.
QUALNAME = f"{__name__}.EngineWorkerExtension"


class EngineWorkerExtension:
    """Mixed into vLLM's worker class: `self` is the worker."""

    def rft_refresh_tied_cpu_gemms(self) -> int:
        """Re-dispatch the CPU GEMM of every layer that shares its weight with another (a tied lm_head); how many
        it rebuilt. On GPU no layer has a CPU kernel, so none.

        vLLM's CPU backend packs each linear layer's weight into a oneDNN kernel when it loads the model. A reload
        rebuilds the kernels of the layers it loads weights into; a tied lm_head gets none (its weight is the
        embedding's), so it kept computing logits with the weights the engine started with. Measured on the arith
        warm-up's model (SmolLM2, tied): greedy 0.817 after a reload against 0.867 from an engine started on it.
        """
        owners: dict[int, list[Any]] = {}
        for module in self.get_model().modules():  # type: ignore[attr-defined]
            weight = module._parameters.get("weight")
            if weight is not None and weight.ndim == 2 and weight.numel() and hasattr(module, "cpu_linear"):
                owners.setdefault(id(weight), []).append(module)
        tied = [module for modules in owners.values() if len(modules) > 1 for module in modules]
        if tied:
            from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

            for module in tied:
                dispatch_cpu_unquantized_gemm(module, remove_weight=False)
        return len(tied)
