"""The torch trainer's core on an accelerator, step for step against the same steps on CPU (scripts/device-check.sh).

For a machine with a GPU and PyTorch's CUDA stack but no vLLM, Ray, Prefect or network: the trainer's core
(backends/torch_trainer.py and what it imports) needs none of them. Each check builds the trainer twice from one
model folder and seed, on the device and on CPU, feeds both the same batches and compares:

- `step/<loss>/<dtype>`: two optimizer steps of each policy loss the trainer can run on sampled rows alone, in
  float32 and bfloat16: the losses of both steps, then the trained models' logits on a fixed sequence;
- `lora/<dtype>`: the same with a LoRA adapter (merged when exported);
- `checkpoint`: a step, save, a fresh trainer on the device loads it, a second step on both: identical models;
- `export`: the safetensors the engines load (LoRA merged) read back by transformers on CPU give the device
  model's logits.

`--dry-run` compares CPU with CPU (the same code, no device): what the test suite runs. One line per check, and a
JSON written whole at the end (--out). Exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# How far the device may be from CPU: float32 differs in the order of sums only; bfloat16 rounds every product.
TOLERANCE = {"float32": {"loss": 1e-4, "logits": 2e-3}, "bfloat16": {"loss": 5e-2, "logits": 0.25}}
LR = 1e-4


@dataclass
class Check:
    name: str
    ok: bool
    seconds: float
    detail: dict[str, Any] = field(default_factory=dict)


def _batch(step: int) -> list[Any]:
    from buffer.experience import Experience

    rows = []
    for i, adv in enumerate([1.0, -1.0, 0.5, -0.5]):
        prompt = [1, 9690, 198, 2683, 314, 216, 33 + i + step]
        response = [504 + i, 314, 216, 34 + i, 2][: 3 + i % 3]
        rows.append(Experience(eid=f"s{step}/{i}", task_id=f"t{i // 2}", group_id=f"g{i // 2}",
                               prompt_token_ids=prompt, response_token_ids=response,
                               logprobs=[-1.0] * len(response), reward=adv, advantage=adv))
    return rows


def _config(device: str, dtype: str, overrides: dict[str, Any]) -> Any:
    from deployments import load_recipe

    return load_recipe("smoke").with_overrides({
        "algorithm.optimizer.lr": LR, "algorithm.optimizer.weight_decay": 0.0, "trainer.micro_batch_size": 2,
        "trainer.device": device, "trainer.dtype": dtype, "algorithm.kl_loss_fn": "none", **overrides,
    })


def _trainer(model_dir: Path, device: str, dtype: str, overrides: dict[str, Any]) -> Any:
    from backends.torch_trainer import TorchTrainer

    return TorchTrainer(_config(device, dtype, overrides), model_dir, total_steps=4)


def _logits(model: Any, device: str) -> Any:
    import torch

    ids = torch.tensor([[1, 9690, 198, 2683, 314, 216, 33, 504, 314, 216]], device=device)
    with torch.no_grad():
        return model(input_ids=ids).logits.float().cpu()


def _steps(trainer: Any) -> list[float]:
    return [float(trainer.train_step(_batch(step)).get("pg_loss", float("nan"))) for step in (1, 2)]


def compare_steps(model_dir: Path, device: str, dtype: str, overrides: dict[str, Any]) -> dict[str, Any]:
    on_device, on_cpu = _trainer(model_dir, device, dtype, overrides), _trainer(model_dir, "cpu", dtype, overrides)
    losses_device, losses_cpu = _steps(on_device), _steps(on_cpu)
    loss_diff = max(abs(a - b) for a, b in zip(losses_device, losses_cpu, strict=True))
    logit_diff = (_logits(on_device.model, device) - _logits(on_cpu.model, "cpu")).abs().max().item()
    tol = TOLERANCE[dtype]
    return {"ok": loss_diff <= tol["loss"] and logit_diff <= tol["logits"], "losses_device": losses_device,
            "losses_cpu": losses_cpu, "max_loss_diff": loss_diff, "max_logit_diff": logit_diff, "tolerance": tol}


def check_checkpoint(model_dir: Path, device: str, work: Path) -> dict[str, Any]:
    first = _trainer(model_dir, device, "float32", {})
    first.train_step(_batch(1))
    first.save_checkpoint(work / "ckpt")
    resumed = _trainer(model_dir, device, "float32", {})
    resumed.load_checkpoint(work / "ckpt")
    first.train_step(_batch(2))
    resumed.train_step(_batch(2))
    a, b = first.model.state_dict(), resumed.model.state_dict()
    diff = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    return {"ok": diff <= 1e-6, "max_param_diff": diff}


def check_export(model_dir: Path, device: str, work: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    trainer = _trainer(model_dir, device, "float32", overrides)
    trainer.train_step(_batch(1))
    folder = work / "export"
    shutil.copytree(model_dir, folder)
    trainer.export_weights(folder)
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    model = trainer.model.merge_and_unload() if hasattr(trainer.model, "merge_and_unload") else trainer.model
    diff = (_logits(loaded, "cpu") - _logits(model, device)).abs().max().item()
    return {"ok": diff <= TOLERANCE["float32"]["logits"], "max_logit_diff": diff}


def trainable_losses() -> list[str]:
    """The policy losses the torch trainer runs on sampled rows alone (no pairs, teacher, expert rows or critic)."""
    from algorithms import POLICY_LOSS_FNS

    return [name for name in sorted(POLICY_LOSS_FNS) if name in TRAINS_ON_SAMPLES]


# Losses that train on a GRPO batch as it is; the others need pairs (dpo), expert rows (mix, sft*), a teacher
# (topk_distill) or a step's own inputs (m2po's second moments come with its own batch layout).
TRAINS_ON_SAMPLES = ("ppo", "gspo", "cispo", "opmd", "topr", "sapo", "sppo", "rec", "importance_sampling")


def run(model_dir: Path, device: str, out: Path | None) -> int:
    import torch

    checks: list[Check] = []

    def record(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        started = time.perf_counter()
        try:
            detail = fn()
            ok = bool(detail.pop("ok"))
        except Exception as err:  # noqa: BLE001  one check's failure is reported, the others still run
            ok, detail = False, {"error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()[-2000:]}
        check = Check(name, ok, round(time.perf_counter() - started, 2), detail)
        checks.append(check)
        summary = {k: v for k, v in detail.items() if k.startswith("max_") or k == "error"}
        print(f"{'ok  ' if ok else 'FAIL'} {name:<34} {check.seconds:7.2f} s  {json.dumps(summary)}", flush=True)

    with tempfile.TemporaryDirectory(prefix="device-check-") as tmp:
        work = Path(tmp)
        for dtype in ("float32", "bfloat16"):
            for loss in trainable_losses():
                record(f"step/{loss}/{dtype}", lambda loss=loss, dtype=dtype: compare_steps(
                    model_dir, device, dtype, {"algorithm.policy_loss_fn": loss}))
            lora = {"model.lora_configs": [{"lora_rank": 8, "lora_alpha": 16}], "algorithm.optimizer.lr": 1e-3}
            record(f"lora/{dtype}", lambda dtype=dtype, lora=lora: compare_steps(model_dir, device, dtype, lora))
        record("checkpoint", lambda: check_checkpoint(model_dir, device, work / "c"))
        record("export", lambda: check_export(model_dir, device, work / "e", {}))
        record("export/lora", lambda: check_export(model_dir, device, work / "l",
                                                   {"model.lora_configs": [{"lora_rank": 8, "lora_alpha": 16}]}))
    failed = [c.name for c in checks if not c.ok]
    report = {
        "device": device, "device_name": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor(),
        "torch": torch.__version__, "cuda": torch.version.cuda, "model_dir": str(model_dir),
        "passed": len(checks) - len(failed), "failed": len(failed), "checks": [asdict(c) for c in checks],
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a Hugging Face model folder (small: tests/tiny_model.py)")
    parser.add_argument("--device", default="cuda", help="the device compared with CPU (default cuda)")
    parser.add_argument("--dry-run", action="store_true", help="compare CPU with CPU: the checks' code, no device")
    parser.add_argument("--out", type=Path, default=None, help="where the JSON report goes")
    args = parser.parse_args()
    device = "cpu" if args.dry_run else args.device
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("device-check: torch sees no CUDA device (use --dry-run on a CPU machine)", file=sys.stderr)
            return 2
    return run(args.model, device, args.out)


if __name__ == "__main__":
    sys.exit(main())
