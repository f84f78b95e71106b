"""The serve endpoint under load, on loopback: N concurrent `openai` clients for a fixed time against one vLLM
(CPU) engine's OpenAI endpoint with its API key, while batch rollouts run on the same engine.

Reports p50/p99 latency, errors (0 expected), requests per second and the batch rollouts that finished
beside them; checks that a request without the key gets 401 and that the key appears in no log line.
Writes the JSON whole (a temporary file renamed) to --out, default benchmarks/measured/serve_load.json.

    .venv/bin/python benchmarks/serve_load.py [--clients 8] [--seconds 60] [--out FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import secrets
import statistics
import sys
import threading
import time
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process, as in the actors
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
KEY_ENV = "RFT_LOAD_TEST_API_KEY"
DEFAULT_OUT = Path(__file__).resolve().parent / "measured" / "serve_load.json"


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(clients: int, seconds: float, max_tokens: int = 16, batch_size: int = 8) -> dict:
    import httpx
    import openai

    from backends.local.vllm_engine import EngineSettings, VLLMEngine
    from backends.rollout import SamplingSettings
    from checkpointing.models import resolve_model_path
    from deployments import load_recipe

    key = os.environ.get(KEY_ENV) or secrets.token_urlsafe(24)  # a test passes its own, to search its output
    os.environ[KEY_ENV] = key
    captured = io.StringIO()  # every log line of the run, searched for the key at the end
    handler = logging.StreamHandler(captured)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    config = load_recipe("smoke").with_overrides({
        "explorer.rollout_model.enable_openai_api": True,
        "explorer.rollout_model.openai_api_key_secret": f"env:{KEY_ENV}",
        "explorer.rollout_model.openai_max_concurrent_requests": clients,
    })
    settings = EngineSettings.from_config(config, str(resolve_model_path(MODEL_ID)))
    engine = VLLMEngine("serve-load-0", asdict(replace(settings, kv_cache_memory_bytes=2**29)))
    try:
        url = engine.openai_base_url()
        assert url and url.startswith("http://127.0.0.1:"), url
        unauthenticated = httpx.post(f"{url}/chat/completions", json={"model": "policy", "messages": []}, timeout=30)
        latencies: list[float] = []
        errors: list[str] = []
        batches: list[float] = []
        lock = threading.Lock()
        stop_at = time.monotonic() + seconds

        def client_loop(i: int) -> None:
            client = openai.OpenAI(base_url=url, api_key=engine.openai_api_key(), max_retries=0, timeout=120)
            n = 0
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                try:
                    client.chat.completions.create(model="policy", max_tokens=max_tokens, temperature=1.0,
                                                   messages=[{"role": "user", "content": f"Count to {i + n}."}])
                    with lock:
                        latencies.append(time.perf_counter() - started)
                except Exception as err:  # counted, reported by type
                    with lock:
                        errors.append(type(err).__name__)
                n += 1
            client.close()

        def batch_loop() -> None:
            prompts = [[1, 9690, 198, 2683, 314, 216, 33 + j] for j in range(batch_size)]
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                out = engine.generate(prompts, SamplingSettings(max_tokens=max_tokens, temperature=1.0))
                assert len(out) == batch_size
                batches.append(time.perf_counter() - started)

        threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
        threads.append(threading.Thread(target=batch_loop))
        began = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - began
    finally:
        engine.shutdown()
        logging.getLogger().removeHandler(handler)
    return {
        "what": "one vLLM CPU engine's OpenAI endpoint (127.0.0.1, API key on) under concurrent openai clients, "
                "with batch rollouts on the same engine",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "model": MODEL_ID,
        "clients": clients,
        "seconds": round(elapsed, 1),
        "max_tokens": max_tokens,
        "requests": len(latencies),
        "errors": len(errors),
        "error_types": sorted(set(errors)),
        "latency_p50_s": percentile(latencies, 0.50),
        "latency_p99_s": percentile(latencies, 0.99),
        "latency_mean_s": statistics.fmean(latencies) if latencies else None,
        "requests_per_s": len(latencies) / elapsed if elapsed else None,
        "batch_rollouts": {"batch_size": batch_size, "finished": len(batches),
                           "p50_s": percentile(batches, 0.5), "max_s": max(batches) if batches else None},
        "unauthenticated_status": unauthenticated.status_code,
        "key_in_logs": key in captured.getvalue(),
    }


def write_whole(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    result = run(args.clients, args.seconds)
    write_whole(result, args.out)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
