"""Mode `serve`: the rollout engines serve an experiment's latest weights on their OpenAI-compatible
endpoints until the flow run is cancelled (or `max_seconds` pass).

The weights are those of the experiment's latest complete checkpoint (converted to a Hugging Face
folder when it is not yet), or the base model when the experiment has none. The endpoints' addresses
are logged, printed and shown as a Prefect artifact. Cancelling the flow run (Prefect UI, `prefect
flow-run cancel`, Ctrl-C under `rft run`) stops the engines: the stage session (flows/stage.py) and the
`rft` flow's state hooks release them.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from checkpointing import layout
from checkpointing.layout import experiment_dir
from flows.stage import stage_session
from schemas import ExperimentConfig
from tasks.convert import convert_checkpoint
from tasks.serve import check_engines, endpoints, latest_checkpoint
from tasks.setup import start_rollout_engines

CHECK_EVERY_S = 30.0


@flow(name="serve", log_prints=True)
def serve(config: ExperimentConfig, max_seconds: float | None = None) -> dict[str, Any]:
    """Serve the experiment's latest weights on `explorer.rollout_model.engine_num` endpoints."""
    logger = get_run_logger()
    # no tracking run, no progress: it serves until cancelled (the session releases the engines then too)
    with stage_session(config, total_steps=0, engines=False, track=False, progress=False) as stage:
        step = latest_checkpoint(config)
        if step is None:
            logger.warning("%s/%s has no checkpoint in %s: serving the base model %s", config.project, config.name,
                           experiment_dir(config), config.model.model_path)
            model_dir, source = stage.model_dir, f"base model {config.model.model_path}"
        else:
            model_dir = convert_checkpoint(str(layout.step_dir(experiment_dir(config), step)), stage.model_dir)["model_dir"]
            source = f"{config.project}/{config.name} step {step}"
        start_rollout_engines(config, model_dir)
        urls = endpoints(config)
        announce(config, urls, source, model_dir)
        started = time.monotonic()
        last_check = started
        while max_seconds is None or time.monotonic() - started < max_seconds:
            time.sleep(1.0)
            if time.monotonic() - last_check >= CHECK_EVERY_S:
                check_engines(config)
                last_check = time.monotonic()
    return {"endpoints": urls, "model_dir": model_dir, "step": step or 0, "served_s": time.monotonic() - started}


def announce(config: ExperimentConfig, urls: list[str], source: str, model_dir: str) -> None:
    """Where to send requests: printed (the run's logs) and a markdown artifact."""
    names = f"`policy` or `{config.model.model_path}`"
    secret = config.explorer.rollout_model.openai_api_key_secret  # where the key is kept: the key never appears
    key_note = (f"API key: the one in `{secret}` (explorer.rollout_model.openai_api_key_secret)." if secret
                else "No API key (a loopback address only).")
    api_key = "os.environ['RFT_API_KEY']" if secret else '"EMPTY"'
    lines = [f"# Serving {source}", "", f"Weights: `{model_dir}`", "", key_note, "", "| engine | OpenAI base URL |",
             "|---|---|"]
    lines += [f"| {i} | `{url}` |" for i, url in enumerate(urls)]
    lines += ["", f"Model name: {names}. For example:", "", "```python", "import os", "from openai import OpenAI",
              f'client = OpenAI(base_url="{urls[0]}", api_key={api_key})',
              'client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Hi"}])', "```"]
    create_markdown_artifact("\n".join(lines), key="serve-endpoints", description="OpenAI-compatible endpoints")
    for i, url in enumerate(urls):
        print(f"engine {i} serves {source} at {url}")
