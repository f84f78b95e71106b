"""Renders benchmarks/grpo_step.py's JSON: a plot beside it, and a markdown section in docs/speed.md.

The section goes between `<!-- bench:begin -->` and `<!-- bench:end -->` (everything between them is replaced;
the rest of the page is left alone), so a new run replaces the old numbers and rendering twice changes
nothing. Every number in the section is a value of the JSON, rounded, or the mean of a side's measured per-step
wall times (`step_walls_s` less the warm-up) and the speed-up by those means (tests/test_bench_report.py checks it).

    .venv/bin/python benchmarks/report.py --json benchmarks/measured/grpo_step.json [--doc docs/speed.md] [--plot]
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from step_profile import PARTS  # beside this script

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
SCHEMA = "grpo_step/2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, type=Path, help="benchmarks/grpo_step.py's output")
    parser.add_argument("--doc", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "speed.md")
    parser.add_argument("--plot", action="store_true", help="also (re)draw the plot beside the JSON")
    args = parser.parse_args()
    report = json.loads(args.json.read_text())
    if report.get("schema") != SCHEMA:
        raise SystemExit(f"{args.json}: not a {SCHEMA} file (schema {report.get('schema')!r}); rerun scripts/bench.sh")
    plot = args.json.with_suffix(".png")
    if args.plot:
        write_plot(report, plot)
    section = render(report, link(args.json, args.doc), link(plot, args.doc) if plot.exists() else None)
    args.doc.write_text(replace_section(args.doc.read_text(), section))
    print(f"{args.doc}: section rendered from {args.json}")


def link(target: Path, doc: Path) -> str:
    return Path(os.path.relpath(target.resolve(), doc.resolve().parent)).as_posix()


def replace_section(page: str, section: str) -> str:
    before, begin, rest = page.partition(BEGIN)
    _, end, after = rest.partition(END)
    if not (begin and end):
        raise SystemExit(f"the page has no {BEGIN} ... {END} markers to write between")
    return f"{before}{BEGIN}\n{section.strip()}\n{END}{after}"


def number(value: float) -> str:
    """Three significant digits or so; never scientific notation."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def side_label(name: str, report: dict) -> str:
    if name.startswith("trl-"):
        return f"TRL GRPOTrainer, {name.removeprefix('trl-')}"
    sync = report["variants"].get(name, {})
    offset, interval = sync.get("synchronizer.sync_offset"), sync.get("synchronizer.sync_interval")
    mode = {0: "ours, in turns", 1: "ours, overlapped"}.get(offset, "ours")
    every = "sync every step" if interval == 1 else f"sync every {interval} steps"
    return f"{mode}, {every} (`{name}`)"


def one_line(text: str, limit: int = 240) -> str:
    """An error as one table cell: its first line, cut at a word, no pipes."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) > limit:
        line = line[:limit].rsplit(" ", 1)[0] + " …"
    return line.replace("|", "\\|")


def measured_walls(side: dict, report: dict) -> list[float]:
    """A side's measured per-step wall times: its `step_walls_s` less the warm-up steps (none where it holds none)."""
    if "seconds_per_step" not in side:
        return []
    return list(side.get("step_walls_s", []))[report.get("warmup_steps", 1):]


def mean_wall(side: dict, report: dict) -> float | None:
    walls = measured_walls(side, report)
    return sum(walls) / len(walls) if walls else None


def mean_reference(shape: dict, report: dict) -> str | None:
    """The fastest TRL configuration at this shape by its measured steps' mean (the JSON's reference is by median)."""
    means = {name: mean_wall(side, report) for name, side in shape["sides"].items() if name.startswith("trl-")}
    means = {name: value for name, value in means.items() if value is not None}
    return min(means, key=means.__getitem__) if means else None


def render(report: dict, json_link: str, plot_link: str | None) -> str:
    m = report["machine"]
    dirty = " with uncommitted changes" if m.get("git_dirty") else ""
    status = "" if report.get("complete") else " **The run stopped before its last shape: the grid is partial.**"
    lacking = [f"{shape['shape']} {name}" for shape in report["shapes"] for name, side in shape["sides"].items()
               if "seconds_per_step" in side and mean_wall(side, report) is None]
    no_walls = (f" The JSON holds no per-step times for {', '.join(lacking)}: their mean and ratio by mean read"
                " \"–\"." if lacking else "")
    lines = [
        f"Generated by `benchmarks/report.py` from [{Path(json_link).name}]({json_link}) (written by `scripts/bench.sh`):"
        f" {m['date_utc']}, commit `{m['git_commit'][:10]}`{dirty}, {m['cpu_count']} cores ({m['cpu_model']}),"
        f" load average {number(m['load_average_at_start'])} at the start. {report['model']}, "
        f"{report['samples_per_prompt']} samples per prompt; per side and shape {report['warmup_steps']} warm-up step,"
        f" then {report['steps_measured']} measured steps: the median of their wall times with [min–max], their mean,"
        f" and samples per second at the median. \"vs TRL, median\": the fastest TRL configuration's median over ours;"
        f" \"vs TRL, mean\": the TRL configuration with the lowest mean, its mean over ours.{no_walls}{status}",
        "",
    ]
    if plot_link:
        lines += [f"![seconds per GRPO step and samples per second against shape]({plot_link})", ""]
    lines += [
        "| shape (prompts x max tokens) | side | s/step, median [min–max] | s/step, mean | generated samples/s"
        " | trained samples/s | vs TRL, median | vs TRL, mean |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for shape in report["shapes"]:
        by_mean = mean_reference(shape, report)
        trl_mean = mean_wall(shape["sides"][by_mean], report) if by_mean else None
        for name, side in shape["sides"].items():
            label = side_label(name, report)
            if "seconds_per_step" not in side:
                error = one_line(side.get("error", ""))
                lines.append(f"| {shape['shape']} | {label} | not measured: {error} | | | | | |")
                continue
            s, mean = side["seconds_per_step"], mean_wall(side, report)
            if name == shape.get("trl_reference"):
                ratio = "reference"
            else:
                ratio = f"{number(side['speedup_vs_trl'])}×" if "speedup_vs_trl" in side else "–"
            if name == by_mean:
                ratio_mean = "reference"
            elif name.startswith("trl-") or mean is None or trl_mean is None:
                ratio_mean = "–"
            else:
                ratio_mean = f"{number(trl_mean / mean)}×"
            lines.append(f"| {shape['shape']} | {label} | {number(s['median'])} [{number(s['min'])}–{number(s['max'])}]"
                         f" | {'–' if mean is None else number(mean)} | {number(side['generated_samples_per_s'])}"
                         f" | {number(side['trained_samples_per_s'])} | {ratio} | {ratio_mean} |")
    return "\n".join(lines + profile_table(report))


def profile_table(report: dict) -> list[str]:
    """Where our steps' time goes (benchmarks/step_profile.py), where the JSON holds a profile."""
    rows = [(shape["shape"], name, side["profile"]) for shape in report["shapes"] for name, side in shape["sides"].items()
            if "shares" in side.get("profile", {})]
    if not rows:
        return []
    parts = (*PARTS, "orchestration")
    lines = ["", "Where the measured steps' wall time goes, from each run's Ray timeline (benchmarks/step_profile.py): the"
             " share of the time when an engine or trainer call of that part ran (overlapped parts add up to more than"
             " 1); orchestration is the share when none ran (Prefect, Ray calls, rewards, the buffer).", "",
             "| shape | side | " + " | ".join(parts) + " |", "|---|---|" + "---|" * len(parts)]
    for shape, name, found in rows:
        lines.append(f"| {shape} | {side_label(name, report)} | " + " | ".join(number(found['shares'][p]) for p in parts) + " |")
    return lines


def write_plot(report: dict, path: Path) -> None:
    """Seconds per step (median, whiskers min–max) and generated samples per second against shape, a line per side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    shapes = [shape["shape"] for shape in report["shapes"]]
    names = list(dict.fromkeys(name for shape in report["shapes"] for name in shape["sides"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in names:
        sides = [shape["sides"].get(name, {}) for shape in report["shapes"]]
        med = [side["seconds_per_step"]["median"] if "seconds_per_step" in side else math.nan for side in sides]
        low = [m - side["seconds_per_step"]["min"] if "seconds_per_step" in side else 0.0 for m, side in zip(med, sides)]
        high = [side["seconds_per_step"]["max"] - m if "seconds_per_step" in side else 0.0 for m, side in zip(med, sides)]
        rate = [side.get("generated_samples_per_s", math.nan) for side in sides]
        style = "--" if name.startswith("trl-") else "-"
        label = side_label(name, report).replace("`", "") + ("" if any(r == r for r in rate) else " (not measured)")
        left.errorbar(shapes, med, yerr=[low, high], linestyle=style, marker="o", capsize=3, label=label)
        right.plot(shapes, rate, linestyle=style, marker="o", label=label)
    left.set(xlabel="prompts x max response tokens (x 8 samples)", ylabel="seconds per step (median, min–max)", yscale="log")
    right.set(xlabel="prompts x max response tokens (x 8 samples)", ylabel="generated samples per second", yscale="log")
    m = report["machine"]
    fig.suptitle(f"GRPO step, {report['model']}: {m['cpu_count']} cores, {m['date_utc']}, {m['git_commit'][:10]}", fontsize=9)
    for axis in (left, right):  # plain numbers on the log axes, not powers of ten
        axis.yaxis.set_major_formatter(ScalarFormatter())
        axis.yaxis.set_minor_formatter(ScalarFormatter())
        axis.tick_params(axis="y", which="minor", labelsize=7)
    left.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
