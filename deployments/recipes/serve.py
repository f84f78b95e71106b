"""serve — mode `serve`: an experiment's latest weights on an OpenAI-compatible endpoint, until cancelled.

`name` (with `project` and `checkpoint_root_dir`) says which experiment: the engine serves its latest
checkpoint (converted to a Hugging Face folder if needed), or the base model when it has none — as for
this recipe's own name. The address is printed and shown as the run's artifact. The endpoint has the
gsm8k-tools recipe's settings (hermes tool calls, the ChatML-with-tools template).

Run it:  rft run serve --set name=gsm8k-tools
         prefect deployment run rft/serve --param 'overrides={"name": "gsm8k-tools-<flow run name>"}'
"""

from deployments.recipes.gsm8k_tools import config as gsm8k_tools

# Nothing is synchronised while serving: weights come from the checkpoint.
config = gsm8k_tools.with_overrides({"mode": "serve", "name": "serve", "synchronizer.sync_method": "checkpoint"})
