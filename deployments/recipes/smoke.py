"""smoke — what CI runs: the gsm8k recipe cut to 2 steps of 2 tasks × 2 rollouts, 32-token answers.

Run it:  rft run smoke          (inspect first: rft validate smoke)
"""

from deployments.recipes.gsm8k import grpo_only as gsm8k

config = gsm8k.with_overrides(
    {
        "name": "smoke",
        "buffer.total_steps": 2,
        "buffer.batch_size": 2,
        "algorithm.repeat_times": 2,
        "model.max_response_tokens": 32,
        "buffer.explorer_input.eval_tasksets.0.split": "test[:4]",
        "explorer.eval_interval": 2,
        "trainer.save_interval": 1,
    }
)
