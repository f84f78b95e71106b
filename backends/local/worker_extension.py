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

    def rft_refresh_cpu_kernels(self) -> tuple[int, int]:
        """After new weights (a reload or a push): the CPU kernels vLLM does not rebuild itself. How many tied layers
        and mixture-of-experts layers were rebuilt; on GPU none."""
        return self.rft_refresh_tied_cpu_gemms(), self.rft_repack_cpu_moe_experts()

    def rft_repack_cpu_moe_experts(self) -> int:
        """Pack each mixture-of-experts layer's new expert weights into the CPU kernel's layout again; how many.

        vLLM's CPU MoE kernel runs on expert weights packed when the model loads. A weight update copies the new
        weights into those tensors unpacked and skips the packing (vLLM 0.30's unquantized_fused_moe_method sets
        the kernel up on the first load only), so the experts computed with neither the old nor the new weights:
        measured on a tiny Qwen3-MoE, top-5 log-probs 0.28 off the trainer's after a reload of unchanged weights.
        """
        repacked = 0
        for module in self.get_model().modules():  # type: ignore[attr-defined]
            method = getattr(module, "quant_method", None)
            kernel = getattr(method, "moe_kernel", None)
            backend = getattr(method, "unquantized_backend", None)
            if kernel is not None and getattr(backend, "name", "") == "CPU":
                kernel.fused_experts.process_weights_after_loading(module)
                repacked += 1
        return repacked

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
