"""What the processes of a side used over a task's work, for the usage ledger (tracking/usage.py)."""

from __future__ import annotations

from backends.policy import policy_for
from schemas import ExperimentConfig


class SideUsage:
    """Started before the work: `metrics()` after it gives the CPU seconds the sides' processes used
    meanwhile (the policy measures them, backends/policy.py) and the GPUs they hold."""

    def __init__(self, config: ExperimentConfig, *sides: str) -> None:
        self.policy = policy_for(config)
        self.sides = sides
        self.started = self._cpu_s()

    def _cpu_s(self) -> float:
        return sum(self.policy.cpu_seconds(side) for side in self.sides)

    def metrics(self, prefix: str) -> dict[str, float]:
        # at least 0: an engine restarted meanwhile counts from its start again
        return {f"{prefix}/cpu_s": max(self._cpu_s() - self.started, 0.0),
                f"{prefix}/gpus": float(sum(self.policy.gpus(side) for side in self.sides))}
