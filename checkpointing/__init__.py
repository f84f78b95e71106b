"""The experiment directory on disk, as Trinity-RFT users know it, and what reads and writes it; and
where a `model.model_path` lives on disk (`checkpointing.models`)."""
