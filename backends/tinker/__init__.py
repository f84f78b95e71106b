"""The Tinker backend: a LoRA trained and sampled on a Tinker server (hosted, or scripts/tinker-server.sh)."""
