"""Where a step's wall time goes, from Ray's timeline of the run (`monitor.enable_ray_timeline`, written to
{experiment}/log/ray_timeline.json) and the end time of each step (the MLflow timestamps of
`time/step_wall_s`).

Each actor method the timeline shows falls in one part: sampling (the engines' generate and score),
training (the trainer's train step and logprobs), sync (publishing, pushing and loading weights on either
side) or checkpoint. A part's share is the time, within the measured steps, when at least one of its
calls ran, over those steps' wall time; overlapped parts (explore beside train) can add up to more than 1.
Orchestration is the rest: the time when no engine or trainer call ran at all (Prefect's flows and tasks,
Ray's calls, rewards, the buffer's reads and writes).

    .venv/bin/python benchmarks/step_profile.py TIMELINE --ends END_S [END_S ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PARTS: dict[str, tuple[str, ...]] = {
    "sampling": ("VLLMEngine.generate", "VLLMEngine.score"),
    # the torch trainer's actor; veRL's FSDP workers (their calls as the timeline names them)
    "training": ("TrainerActor.train_step", "TrainerActor.logprobs", "update_actor", "compute_log_prob",
                 "compute_ref_log_prob", "update_critic", "compute_values"),
    "sync": ("publish_weights", "push_weights", "load_weights", "init_weight_transfer_engine", "start_weight_update",
             "update_weights", "finish_weight_update"),
    "checkpoint": ("save_checkpoint", "load_checkpoint"),
}


def part_of(event_name: str) -> str | None:
    for part, methods in PARTS.items():
        if any(method in event_name for method in methods):
            return part
    return None


def union_length(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] covered by at least one span."""
    covered, end = 0.0, lo
    for start, stop in sorted((max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi):
        if stop > end:
            covered += stop - max(start, end)
            end = stop
    return covered


def spans_by_part(timeline: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """The complete ('X') events of actor method calls, in seconds since the epoch, by part. Ray names a call
    by its method (`name`) and its class and method (`cat`: 'task::VLLMEngine.generate'); `ts` and `dur` are
    microseconds."""
    spans: dict[str, list[tuple[float, float]]] = {part: [] for part in PARTS}
    for event in timeline:
        if event.get("ph") != "X" or "dur" not in event:
            continue
        part = part_of(str(event.get("name", "")) + " " + str(event.get("cat", "")))
        if part is not None:
            start = float(event["ts"]) / 1e6
            spans[part].append((start, start + float(event["dur"]) / 1e6))
    return spans


def profile(timeline: list[dict], step_ends: list[float]) -> dict[str, object]:
    """Shares of the steps after the first (its end starts the window: the first step holds one-time
    costs), whole and per step; `step_ends` are the steps' end times in seconds since the epoch, in order."""
    if len(step_ends) < 2:
        raise ValueError("a profile needs the end times of at least two steps")
    spans = spans_by_part(timeline)
    every = [span for part in spans.values() for span in part]

    def shares(lo: float, hi: float) -> dict[str, float]:
        wall = hi - lo
        out = {part: union_length(spans[part], lo, hi) / wall for part in PARTS}
        out["orchestration"] = 1.0 - union_length(every, lo, hi) / wall
        return {k: round(v, 4) for k, v in out.items()}

    steps = [{"step": k + 2, "wall_s": round(hi - lo, 3), **shares(lo, hi)}
             for k, (lo, hi) in enumerate(zip(step_ends, step_ends[1:], strict=False))]
    return {"window_s": round(step_ends[-1] - step_ends[0], 3), "steps_measured": len(steps),
            "shares": shares(step_ends[0], step_ends[-1]), "per_step": steps,
            "calls_seen": {part: len(found) for part, found in spans.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("timeline", type=Path)
    parser.add_argument("--ends", type=float, nargs="+", required=True, help="each step's end, seconds since the epoch")
    args = parser.parse_args()
    print(json.dumps(profile(json.loads(args.timeline.read_text()), args.ends), indent=2))


if __name__ == "__main__":
    main()
