"""`rft convert`: real sharded checkpoints (veRL's FSDPCheckpointManager on an FSDP2 model, two gloo
processes on CPU) and checkpoints of our torch trainer, merged into HF models and compared by logits."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

LORA_RANK, LORA_ALPHA = 4, 8
TARGETS = ["q_proj", "v_proj", "up_proj"]


# -- models ---------------------------------------------------------------------------------------


def tiny_llama(vocab_size: int, seed: int = 0) -> torch.nn.Module:
    """A random 2-layer Llama; weights rounded to bfloat16 values so veRL's bf16 merge loses nothing."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True, initializer_range=0.2,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    round_to_bf16(model)
    return model


def add_lora(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """peft LoRA with a non-zero B (a fresh adapter is a no-op, which would hide a wrong merge)."""
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(
        model, LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, target_modules=TARGETS, lora_dropout=0.0, task_type="CAUSAL_LM")
    )
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    round_to_bf16(peft_model)
    return peft_model


def round_to_bf16(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.bfloat16().float())


def sample_ids(vocab_size: int) -> torch.Tensor:
    return torch.arange(3, 3 + 7 * 24, 7).remainder(vocab_size).unsqueeze(0)


@torch.no_grad()
def logits_of(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    model.eval()
    return model(input_ids=ids).logits.float()


def load_hf(folder: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


# -- veRL checkpoints: two processes, FSDP2, veRL's own checkpoint manager ---------------------------


def _verl_worker(rank: int, port: int, root: str, tokenizer_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))
    out = Path(root)
    for kind, step in (("full", 2), ("lora", 1)):
        model = tiny_llama(len(tokenizer))
        base_logits = logits_of(model, sample_ids(len(tokenizer)))
        if kind == "lora":
            model = add_lora(model)
        if rank == 0:  # the unsharded model, to compare the merge with
            torch.save(
                {"logits": logits_of(model, sample_ids(len(tokenizer))), "base_logits": base_logits,
                 "state": {k: v.clone() for k, v in model.state_dict().items()}},
                out / f"{kind}_reference.pt",
            )
        layers = model.base_model.model.model.layers if kind == "lora" else model.model.layers
        for layer in layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        manager = FSDPCheckpointManager(model, optimizer, None, processing_class=tokenizer)
        manager.save_checkpoint(str(out / "verl" / kind / f"global_step_{step}" / "actor"), global_step=step)
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def tokenizer_dir() -> Path:
    from checkpointing.models import resolve_model_path

    return resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")


@pytest.fixture(scope="module")
def vocab_size(tokenizer_dir: Path) -> int:
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(tokenizer_dir))


@pytest.fixture(scope="module")
def verl_root(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    import torch.multiprocessing as mp

    root = tmp_path_factory.mktemp("verl")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_verl_worker, args=(port, str(root), str(tokenizer_dir)), nprocs=2, join=True)
    return root


# -- our torch trainer's checkpoints ----------------------------------------------------------------


def save_like_torch_trainer(model: torch.nn.Module, actor: Path, base_dir: Path, lora: bool, step: int) -> None:
    """TorchTrainer.save_checkpoint itself, on the state it reads."""
    from backends.torch_trainer import TorchTrainer
    from schemas.model import LoRAConfig

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    lora_configs = [LoRAConfig(lora_rank=LORA_RANK, lora_alpha=LORA_ALPHA, target_modules=TARGETS)] if lora else None
    trainer = SimpleNamespace(
        model=model, optimizer=optimizer, scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0),
        is_lora=lora, _step=step, model_dir=base_dir, config=SimpleNamespace(model=SimpleNamespace(lora_configs=lora_configs)),
        lora_settings=lora_configs[0].model_dump(mode="json") if lora else None, reward_kl=None, critic=None,
    )
    TorchTrainer.save_checkpoint(trainer, actor)


def write_hf_side_files(tokenizer_dir: Path, model: torch.nn.Module, target: Path) -> None:
    """What the trainer puts into actor/huggingface/: config, tokenizer, no weights."""
    from transformers import AutoTokenizer

    target.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(target)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(target)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path, vocab_size: int) -> Path:
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("base")
    tiny_llama(vocab_size).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(folder)
    return folder


# -- helpers ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prefect_server():
    """A Prefect server stopped when this module ends (an ephemeral one would log at exit into closed
    pytest streams)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture
def rft_convert(prefect_server):
    """`rft convert ARGS...` in this process (the flow runs on the test's Prefect server)."""
    from typer.testing import CliRunner

    from cli.main import app

    return lambda *args: CliRunner().invoke(app, ["convert", *args])


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def hf(step: Path) -> Path:
    return step / "actor" / "huggingface"


# -- tests --------------------------------------------------------------------------------------------


def test_verl_fsdp_shards_merge_into_the_unsharded_model_and_a_second_run_changes_nothing(
    verl_root: Path, rft_convert
) -> None:
    step = verl_root / "verl" / "full" / "global_step_2"
    actor = step / "actor"
    assert sorted(p.name for p in actor.glob("model_world_size_*")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"
    ]
    assert json.loads((actor / "fsdp_config.json").read_text()) == {"FSDP_version": 2, "world_size": 2}
    assert not (hf(step) / "model.safetensors").exists()

    result = rft_convert("--checkpoint-dir", str(actor))  # a path inside the step
    assert result.exit_code == 0, result.output

    reference = torch.load(verl_root / "full_reference.pt")
    merged = load_hf(hf(step))
    state = merged.state_dict()
    for name, tensor in reference["state"].items():
        assert torch.equal(state[name], tensor), name
    assert torch.allclose(logits_of(merged, sample_ids(merged.config.vocab_size)), reference["logits"], atol=1e-5)
    assert {"tokenizer.json", "config.json", "chat_template.jinja"} <= {p.name for p in hf(step).iterdir()}
    assert not (actor / ".huggingface.converting").exists()

    before = snapshot(verl_root / "verl")
    again = rft_convert("--checkpoint-dir", str(step))
    assert again.exit_code == 0, again.output
    assert '"skipped": true' in again.output
    assert snapshot(verl_root / "verl") == before


def test_verl_lora_checkpoint_is_merged_and_its_adapter_exported(verl_root: Path, rft_convert) -> None:
    from peft import PeftModel

    from checkpointing.verify import TOLERANCE

    step = verl_root / "verl" / "lora" / "global_step_1"
    assert (step / "actor" / "lora_train_meta.json").is_file()
    result = rft_convert("--checkpoint-dir", str(step), "--export-adapter")
    assert result.exit_code == 0, result.output

    reference = torch.load(verl_root / "lora_reference.pt")
    merged = load_hf(hf(step))
    assert not any("lora" in name for name in merged.state_dict())
    ids = sample_ids(merged.config.vocab_size)
    diff = (logits_of(merged, ids) - reference["logits"]).abs().max()
    bound = TOLERANCE[torch.bfloat16] * reference["logits"].abs().max()  # veRL's merger stores bfloat16
    assert diff <= bound
    assert (reference["base_logits"] - reference["logits"]).abs().max() > 10 * bound  # the adapter matters

    adapter = hf(step) / "lora_adapter"
    assert {"adapter_model.safetensors", "adapter_config.json"} <= {p.name for p in adapter.iterdir()}
    base = tiny_llama(merged.config.vocab_size)
    assert torch.allclose(logits_of(PeftModel.from_pretrained(base, adapter), ids), reference["logits"], atol=1e-5)


def test_our_lora_checkpoint_matches_the_peft_model_and_exports_its_adapter(
    tmp_path: Path, rft_convert, base_dir: Path, tokenizer_dir: Path, vocab_size: int
) -> None:
    from peft import PeftModel

    peft_model = add_lora(load_hf(base_dir))
    ids = sample_ids(vocab_size)
    expected = logits_of(peft_model, ids)
    step = tmp_path / "proj" / "run" / "global_step_4"
    save_like_torch_trainer(peft_model, step / "actor", base_dir, lora=True, step=4)
    write_hf_side_files(tokenizer_dir, load_hf(base_dir), hf(step))

    result = rft_convert("--checkpoint-dir", str(tmp_path / "proj"), "--export-adapter")
    assert result.exit_code == 0, result.output
    merged = load_hf(hf(step))
    assert (logits_of(merged, ids) - expected).abs().max() <= 1e-4 * expected.abs().max()  # float32 tolerance
    assert (logits_of(load_hf(base_dir), ids) - expected).abs().max() > 1e-2 * expected.abs().max()

    adapter = PeftModel.from_pretrained(load_hf(base_dir), hf(step) / "lora_adapter")
    assert torch.allclose(logits_of(adapter, ids), expected, atol=1e-6)
    assert json.loads((hf(step) / "lora_adapter" / "adapter_config.json").read_text())["r"] == LORA_RANK


def test_missing_config_fails_that_step_by_name_the_others_convert_and_a_base_model_fixes_it(
    tmp_path: Path, rft_convert, base_dir: Path, tokenizer_dir: Path, vocab_size: int
) -> None:
    models = {7: tiny_llama(vocab_size, seed=7), 8: tiny_llama(vocab_size, seed=8)}
    for step_no, model in models.items():
        save_like_torch_trainer(model, tmp_path / f"global_step_{step_no}" / "actor", base_dir, lora=False, step=step_no)
    shutil.rmtree(hf(tmp_path / "global_step_7"), ignore_errors=True)  # a trainer that wrote no huggingface/
    write_hf_side_files(tokenizer_dir, models[8], hf(tmp_path / "global_step_8"))

    result = rft_convert("--checkpoint-dir", str(tmp_path))
    assert result.exit_code == 1
    assert "1 of 2 checkpoints failed" in result.output
    assert "global_step_7" in result.output and "config.json" in result.output and "--base-model-dir" in result.output
    assert not any(hf(tmp_path / "global_step_7").glob("*.safetensors"))
    assert (hf(tmp_path / "global_step_8") / "model.safetensors").is_file()

    result = rft_convert("--checkpoint-dir", str(tmp_path), "--base-model-dir", str(base_dir))
    assert result.exit_code == 0, result.output
    ids = sample_ids(vocab_size)
    for step_no, model in models.items():
        assert torch.equal(logits_of(load_hf(hf(tmp_path / f"global_step_{step_no}")), ids), logits_of(model, ids))
    assert (hf(tmp_path / "global_step_7") / "tokenizer.json").is_file()  # copied from the base model


def test_experiment_dir_converts_every_step_into_sharded_safetensors(
    tmp_path: Path, rft_convert, base_dir: Path, tokenizer_dir: Path, vocab_size: int
) -> None:
    experiment = tmp_path / "checkpoints" / "proj"
    models = {}
    for run, step_no, seed in (("a", 1, 11), ("a", 2, 12), ("b/stage2", 3, 13)):
        step = experiment / run / f"global_step_{step_no}"
        models[step] = tiny_llama(vocab_size, seed=seed)
        save_like_torch_trainer(models[step], step / "actor", base_dir, lora=False, step=step_no)
        write_hf_side_files(tokenizer_dir, models[step], hf(step))
    (experiment / "a" / "global_step_9.tmp" / "actor").mkdir(parents=True)  # an unfinished save: ignored

    result = rft_convert("--checkpoint-dir", str(experiment), "--max-shard-size", "2MB")
    assert result.exit_code == 0, result.output
    for step, model in models.items():
        index = json.loads((hf(step) / "model.safetensors.index.json").read_text())
        shards = sorted(set(index["weight_map"].values()))
        assert len(shards) > 1 and all((hf(step) / name).is_file() for name in shards)
        assert not (hf(step) / "model.safetensors").exists()
        ids = sample_ids(vocab_size)
        assert torch.equal(logits_of(load_hf(hf(step)), ids), logits_of(model, ids))

    from prefect.artifacts import Artifact

    table = json.loads(Artifact.get("converted-checkpoints").data)
    assert [row["step"] for row in table] == ["global_step_1", "global_step_2", "global_step_3"]
    assert all(row["skipped"] is False and row["error"] is None for row in table)

    before = snapshot(experiment)
    again = rft_convert("--checkpoint-dir", str(experiment), "--max-shard-size", "2MB")
    assert again.exit_code == 0, again.output
    assert snapshot(experiment) == before


def test_step_discovery(tmp_path: Path) -> None:
    from checkpointing.layout import find_step_dirs

    for sub in ("x/global_step_10/actor/huggingface", "x/global_step_2/actor", "y/z/global_step_1/actor", "x/global_step_3.tmp"):
        (tmp_path / sub).mkdir(parents=True)
    root = tmp_path.resolve()
    assert find_step_dirs(tmp_path) == [root / "x/global_step_2", root / "x/global_step_10", root / "y/z/global_step_1"]
    assert find_step_dirs(tmp_path / "x/global_step_10/actor/huggingface") == [root / "x/global_step_10"]
    assert find_step_dirs(tmp_path / "x/global_step_3.tmp") == []


def test_broken_veRL_checkpoints_fail_with_the_step_named(tmp_path: Path, verl_root: Path) -> None:
    from checkpointing.merge import convert_step

    step = tmp_path / "global_step_5"
    shutil.copytree(verl_root / "verl" / "full" / "global_step_2", step)
    for leftover in hf(step).glob("model*.safetensors*"):
        leftover.unlink()
    (step / "actor" / "model_world_size_2_rank_1.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"global_step_5.*ranks \[1\]"):
        convert_step(step)
    os.remove(step / "actor" / "fsdp_config.json")
    with pytest.raises(FileNotFoundError, match="global_step_5.*fsdp_config.json"):
        convert_step(step)


def test_verification_rejects_logits_of_another_model(tmp_path: Path, base_dir: Path, vocab_size: int) -> None:
    from checkpointing.verify import VerificationError, logits, sample_input, verify

    ids = sample_input(vocab_size)
    assert verify(base_dir, logits(load_hf(base_dir), ids), ids, torch.float32, "global_step_1") == 0.0
    other = logits(tiny_llama(vocab_size, seed=99), ids)
    with pytest.raises(VerificationError, match="global_step_1.*nothing was written"):
        verify(base_dir, other, ids, torch.bfloat16, "global_step_1")
