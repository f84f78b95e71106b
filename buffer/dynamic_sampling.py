"""DAPO's dynamic sampling (veRL's `filter_groups`): a step keeps only groups whose rewards differ.

A group whose responses all got the same reward has zero advantage and teaches nothing. It is dropped
(and recorded as dropped, never silently lost), and more rounds of tasks are sampled until `batch_size`
informative groups are in or `max_rounds` extra rounds are spent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from buffer.experience import Experience


def split_by_variance(experiences: list[Experience], eps: float = 1e-6) -> tuple[list[Experience], list[Experience]]:
    """(experiences of groups whose rewards differ, experiences of all-equal groups), order kept."""
    groups: dict[str, list[float]] = {}
    for e in experiences:
        groups.setdefault(e.group_id, []).append(e.reward)
    flat = {g for g, rewards in groups.items() if len(rewards) < 2 or max(rewards) - min(rewards) <= eps}
    return [e for e in experiences if e.group_id not in flat], [e for e in experiences if e.group_id in flat]


@dataclass
class FilledStep:
    kept: list[Experience] = field(default_factory=list)  # batch_size informative groups at most
    dropped: list[Experience] = field(default_factory=list)  # all-equal groups, and informative surplus
    rounds: int = 0  # rounds sampled, the first included
    groups_dropped: int = 0  # all-equal groups

    def metrics(self) -> dict[str, float]:
        total = len(self.kept) + len(self.dropped)
        return {"explore/dynamic_sampling_rounds": float(self.rounds),
                "explore/dynamic_sampling_groups_dropped": float(self.groups_dropped),
                "explore/dynamic_sampling_dropped_share": len(self.dropped) / total if total else 0.0}


def fill_step(sample_round: Callable[[int], list[Experience]], batch_size: int, max_extra_rounds: int) -> FilledStep:
    """Call `sample_round(r)` (r = 0, 1, …) until `batch_size` groups with reward variance are kept or
    `max_extra_rounds` rounds after the first are spent; groups beyond `batch_size` are dropped too,
    so the step has a fixed size when it fills."""
    out = FilledStep()
    kept_groups: list[str] = []
    while out.rounds <= max_extra_rounds and len(kept_groups) < batch_size:
        kept, flat = split_by_variance(sample_round(out.rounds))
        out.rounds += 1
        out.groups_dropped += len({e.group_id for e in flat})
        out.dropped += flat
        for e in kept:
            if e.group_id not in kept_groups and len(kept_groups) >= batch_size:
                out.dropped.append(e)
                continue
            if e.group_id not in kept_groups:
                kept_groups.append(e.group_id)
            out.kept.append(e)
    return out
