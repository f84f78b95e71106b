"""DAPO's dynamic sampling (veRL's `filter_groups`): a step keeps only groups whose rewards differ.

A group whose responses all got the same reward has zero advantage and teaches nothing (with token-mean
aggregation it only dilutes the others). It is dropped (and recorded as dropped, never silently lost),
and more rounds of tasks are sampled until `batch_size` informative groups are in or `max_rounds`
rounds are spent. tasks/explore.py calls it; the experience store records what was dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from buffer.experience import Experience


def metric_of(experience: Experience, metric: str) -> float:
    """algorithm.filter_groups.metric of one experience: its reward, or a key of its reward breakdown."""
    if metric == "reward":
        return experience.reward
    if metric not in experience.reward_breakdown:
        raise ValueError(f"algorithm.filter_groups.metric {metric!r}: task {experience.task_id}'s workflow gives no "
                         f"{metric!r} (its reward breakdown: {sorted(experience.reward_breakdown)}); use 'reward'")
    return float(experience.reward_breakdown[metric])


def split_by_variance(experiences: list[Experience], metric: str = "reward", eps: float = 1e-6
                      ) -> tuple[list[Experience], list[Experience]]:
    """(experiences of groups whose `metric` differs, experiences of all-equal groups), order kept."""
    groups: dict[str, list[float]] = {}
    for e in experiences:
        groups.setdefault(e.group_id, []).append(metric_of(e, metric))
    flat = {g for g, values in groups.items() if len(values) < 2 or max(values) - min(values) <= eps}
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
                "explore/dynamic_sampling_groups_kept": float(len({e.group_id for e in self.kept})),
                "explore/dynamic_sampling_dropped_share": len(self.dropped) / total if total else 0.0}


def fill_step(sample_round: Callable[[int], list[Experience]], batch_size: int, max_rounds: int,
              metric: str = "reward") -> FilledStep:
    """Call `sample_round(r)` (r = 0, 1, …) until `batch_size` groups whose `metric` differs are kept or
    `max_rounds` rounds (the first included) are spent; groups beyond `batch_size` are dropped too, so a
    filled step has a fixed size. A step where no group differs in any round keeps its first round (zero
    advantage: the run goes on, the step teaches nothing), so the trainer always has a batch."""
    out = FilledStep()
    kept_groups: list[str] = []
    first: list[Experience] = []
    while out.rounds < max(max_rounds, 1) and len(kept_groups) < batch_size:
        sampled = sample_round(out.rounds)
        first = first or sampled
        kept, flat = split_by_variance(sampled, metric)
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
    if not out.kept and first:
        ids = {e.eid for e in first}
        out.kept = [e for e in out.dropped if e.eid in ids]
        out.dropped = [e for e in out.dropped if e.eid not in ids]
        out.groups_dropped -= len({e.group_id for e in first})
    return out
