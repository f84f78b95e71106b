"""benchmarks/report.py on a small grid built with benchmarks/grpo_step.py's own summary functions (no flow, no
TRL): the section it writes into a page holds only numbers the JSON holds (or the means of the per-step times it
holds, and the speed-ups by them), replaces only what lies between the markers, and a second rendering changes
nothing. Pure python and matplotlib: no Prefect, Ray or model."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import grpo_step  # noqa: E402
from report import BEGIN, END, number  # noqa: E402

# A number standing alone (not inside a word such as offset0 or a commit hash e422515).
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


def grid() -> dict:
    """Two shapes; ours in turns and overlapped, TRL's two configurations (one failed), walls made up."""
    def shape(text: str, walls: dict[str, list[float]], trained: float, trl_error: str) -> dict:
        spec = grpo_step.parse_shape(text)
        n = spec["samples_per_step"]
        sides = {name: {"sync_offset": int(name[6]), **grpo_step.summarise(w, n, trained)} for name, w in walls.items()}
        sides["trl-transformers-generate"] = {"config": "transformers-generate", **grpo_step.summarise([31.7, 23.41, 22.87, 24.96], n, n)}
        sides["trl-vllm-colocate"] = {"config": "vllm-colocate", "error": trl_error}
        sides["offset0-interval1"]["profile"] = {"shares": {"sampling": 0.6123, "training": 0.2311, "sync": 0.0412,
                                                            "checkpoint": 0.0, "orchestration": 0.1154}}
        return {**spec, **grpo_step.compare(sides)}

    return {
        "schema": "grpo_step/2",
        "machine": {**grpo_step.machine(), "date_utc": "2026-11-26T15:04:05Z", "cpu_model": "Test CPU @ 2.20GHz"},
        "model": "SmolLM2-135M-Instruct float32 (GSM8K train prompts)",
        "samples_per_prompt": 8,
        "warmup_steps": 1,
        "steps_measured": 3,
        "statistic": "median",
        "variants": {name: grpo_step.VARIANTS[name] for name in ("offset0-interval1", "offset1-interval1")},
        "trl_configs": list(grpo_step.TRL_CONFIGS),
        "overrides": [],
        "shapes": [
            shape("1x128", {"offset0-interval1": [15.24, 20.2, 13.49, 21.44], "offset1-interval1": [14.1, 12.07, 11.93, 12.61]}, 6.0,
                  "ValueError: vLLM's CPU worker refused external_launcher (line 1234)"),
            shape("4x512", {"offset0-interval1": [95.5, 88.31, 90.02, 87.7], "offset1-interval1": [99.0, 80.4, 81.66, 79.9]}, 27.5,
                  "not run: failed at shape 1x128 (see there)"),
        ],
        "complete": True,
    }


def leaves(value: object) -> tuple[list[float], set[str]]:
    """The JSON's numbers, and the numbers written inside its strings and keys (a date, a CPU's GHz, a shape)."""
    numbers, words = [], set()
    if isinstance(value, bool):
        return numbers, words
    if isinstance(value, int | float):
        return [float(value)], words
    if isinstance(value, str):
        return numbers, set(NUMBER.findall(value))
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, item in items:
        n, w = leaves(item)
        numbers += n
        words |= w | (set(NUMBER.findall(key)) if isinstance(key, str) else set())
    return numbers, words


def means(report: dict) -> list[float]:
    """What the section may derive from the JSON: each side's mean of its measured steps (the warm-up left out), and
    each of our sides' speed-up by mean over the TRL configuration with the lowest mean."""
    found = []
    for shape in report["shapes"]:
        mean = {name: statistics.mean(side["step_walls_s"][report["warmup_steps"]:])
                for name, side in shape["sides"].items() if "seconds_per_step" in side and "step_walls_s" in side}
        trl = min((value for name, value in mean.items() if name.startswith("trl-")), default=None)
        found += list(mean.values())
        found += [trl / value for name, value in mean.items() if trl and not name.startswith("trl-")]
    return found


def foreign_numbers(section: str, report: dict) -> list[str]:
    """Numbers in the section that are neither a JSON number (or a mean of its per-step times, or a speed-up by those
    means), rounded as printed, nor written in a JSON string."""
    numbers, words = leaves(report)
    numbers += means(report)
    def held(token: str) -> bool:
        decimals = len(token.partition(".")[2])
        return token in words or any(abs(v - float(token)) <= 0.5 * 10**-decimals + 1e-9 for v in numbers)
    return [token for token in NUMBER.findall(section) if not held(token)]


def section_of(page: str) -> str:
    return page.split(BEGIN, 1)[1].split(END, 1)[0]


def render(json_path: Path, doc: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "report.py"), "--json", str(json_path), "--doc", str(doc),
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.fixture
def page(tmp_path: Path) -> tuple[Path, Path, dict]:
    report = grid()
    json_path = tmp_path / "measured" / "grpo_step.json"
    grpo_step.write_whole(json_path, report)
    doc = tmp_path / "docs" / "speed.md"
    doc.parent.mkdir()
    doc.write_text(f"# Speed\n\nHand-written 12.3 s.\n\n{BEGIN}\nnot yet run with scripts/bench.sh\n{END}\n\n## Later\n\n7 %\n")
    return json_path, doc, report


def test_the_section_holds_the_json_numbers_and_no_others(page: tuple[Path, Path, dict]) -> None:
    json_path, doc, report = page
    done = render(json_path, doc, "--plot")
    assert done.returncode == 0, done.stderr
    text = doc.read_text()
    section = section_of(text)
    assert not foreign_numbers(section, report), foreign_numbers(section, report)
    assert "not yet run" not in section
    # 1x128 in turns: median 20.2 of [20.2, 13.49, 21.44] (the warm-up 15.24 left out), 8 samples / 20.2 s; TRL the reference
    # its mean 18.4 = (20.2 + 13.49 + 21.44) / 3; by mean TRL's (23.41 + 22.87 + 24.96) / 3 = 23.7 over it, 1.29×
    assert "| 20.2 [13.5–21.4] | 18.4 | 0.396 | 0.297 | 1.16× | 1.29× |" in section
    assert "| 23.4 [22.9–25.0] | 23.7 | 0.342 | 0.342 | reference | reference |" in section
    assert "not measured: ValueError: vLLM's CPU worker refused external_launcher" in section
    assert "| 1x128 | ours, in turns, sync every step (`offset0-interval1`) | 0.612 | 0.231 | 0.041 | 0.000 | 0.115 |" in section
    assert "](../measured/grpo_step.json)" in section and "](../measured/grpo_step.png)" in section
    assert json_path.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the page outside the markers is untouched
    assert text.startswith("# Speed\n\nHand-written 12.3 s.\n\n") and text.endswith(f"{END}\n\n## Later\n\n7 %\n")


def test_the_check_finds_a_number_the_json_does_not_hold(page: tuple[Path, Path, dict]) -> None:
    json_path, doc, report = page
    assert render(json_path, doc).returncode == 0
    section = section_of(doc.read_text())
    assert foreign_numbers(section.replace("| 20.2 [", "| 19.8 ["), report) == ["19.8"]


def test_rendering_twice_changes_nothing_and_a_new_run_replaces_the_old(page: tuple[Path, Path, dict]) -> None:
    json_path, doc, report = page
    assert render(json_path, doc).returncode == 0
    once = doc.read_text()
    assert render(json_path, doc).returncode == 0
    assert doc.read_text() == once
    report["shapes"] = report["shapes"][:1]
    report["complete"] = False
    grpo_step.write_whole(json_path, report)
    assert render(json_path, doc).returncode == 0
    section = section_of(doc.read_text())
    assert "4x512" not in section and "partial" in section
    assert doc.read_text().count(BEGIN) == 1 and doc.read_text().count(END) == 1


def test_a_file_of_the_old_schema_is_refused(page: tuple[Path, Path, dict]) -> None:
    _, doc, _ = page
    before = doc.read_text()
    old = ROOT / "benchmarks" / "measured" / "grpo_step_2026-11-25_interleaved_bce1297_1.json"
    done = render(old, doc)
    assert done.returncode != 0 and "grpo_step/2" in done.stderr + done.stdout
    assert doc.read_text() == before


def test_shapes_parse_and_a_bad_one_is_named() -> None:
    assert grpo_step.parse_shape("16x512") == {"shape": "16x512", "prompts": 16, "max_response_tokens": 512, "samples_per_step": 128}
    with pytest.raises(Exception, match="PROMPTSxTOKENS"):
        grpo_step.parse_shape("16by512")


def test_the_summary_drops_the_warm_up_step_and_compares_with_the_fastest_trl() -> None:
    summary = grpo_step.summarise([50.0, 10.0, 30.0, 20.0], 8, 6)
    assert summary["seconds_per_step"] == {"median": 20.0, "min": 10.0, "max": 30.0} and summary["steps_measured"] == 3
    assert summary["generated_samples_per_s"] == 0.4 and summary["trained_samples_per_s"] == 0.3
    sides = {"ours": summary, "trl-a": grpo_step.summarise([9, 60, 60], 8, 8), "trl-b": grpo_step.summarise([9, 40, 40], 8, 8),
             "trl-c": {"error": "cannot run"}}
    compared = grpo_step.compare(sides)
    assert compared["trl_reference"] == "trl-b" and sides["ours"]["speedup_vs_trl"] == 2.0
    assert "error" in grpo_step.summarise([12.0], 8, 8)  # a warm-up step alone measures nothing


def test_a_stuck_trl_step_ends_the_process_with_the_error_the_benchmark_records() -> None:
    """trl_grpo.py's watchdog: a step past its limit prints the error line grpo_step.py keeps, and exits."""
    code = ("import sys, time; sys.path.insert(0, 'benchmarks'); import trl_grpo; "
            "now = time.perf_counter(); trl_grpo.watch([now - 30, now - 20], 1.0, 'vllm-colocate')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 1
    assert printed["config"] == "vllm-colocate" and printed["error"] == "TimeoutError: step 2 did not finish within 1 s"
    assert printed["step_walls_s_finished"] == [10.0]


def test_a_grid_whose_trl_cannot_run_is_written_whole_with_the_reason(tmp_path: Path) -> None:
    """grpo_step.py end to end with no variant (no flow) and no TRL on the path: each shape is in the JSON, TRL's
    error at the first shape, "not run" at a larger one, tried again at a smaller one; the plot beside it, and
    report.py renders it."""
    out = tmp_path / "grid.json"
    env = {k: v for k, v in os.environ.items() if k != "RFT_TRL_SITE"} | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "grpo_step.py"), "--variants", "--shapes", "1x32", "2x32", "1x16",
                           "--trl", "transformers-generate", "--steps", "2", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["complete"] and [s["shape"] for s in report["shapes"]] == ["1x32", "2x32", "1x16"]
    first, larger, smaller = (s["sides"]["trl-transformers-generate"] for s in report["shapes"])
    assert first["error"] == smaller["error"] == "TRL is not installed (run scripts/bench.sh)"
    assert larger["error"] == "not run: failed at shape 1x32 (see there)"
    assert report["machine"]["cpu_count"] == os.cpu_count() and len(report["machine"]["git_commit"]) == 40
    assert out.with_suffix(".png").is_file() and (tmp_path / "grid.logs" / "trl-transformers-generate-1x32.log").is_file()
    doc = tmp_path / "speed.md"
    doc.write_text(f"{BEGIN}\n{END}\n")
    assert render(out, doc).returncode == 0
    assert "not measured: TRL is not installed" in doc.read_text()


def test_the_committed_speed_section_is_what_the_committed_json_renders() -> None:
    """docs/speed.md's section between the markers is benchmarks/report.py's rendering of the committed
    benchmarks/measured/grpo_step.json, exactly: no number there was typed by hand or left from an older run."""
    import report

    doc, source = ROOT / "docs" / "speed.md", ROOT / "benchmarks" / "measured" / "grpo_step.json"
    data = json.loads(source.read_text())
    plot = source.with_suffix(".png")
    section = report.render(data, report.link(source, doc), report.link(plot, doc) if plot.exists() else None)
    committed = doc.read_text().partition(BEGIN)[2].partition(END)[0]
    assert committed.strip() == section.strip()


def rows(section: str) -> dict[tuple[str, str], list[str]]:
    """The speed table's measured rows: (shape, side's label) -> the cells after them."""
    found = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 8 and "[" in cells[2]:
            found[(cells[0], cells[1])] = cells[2:]
    return found


def test_the_mean_column_is_the_mean_of_the_measured_steps_and_the_ratio_by_mean_is_right() -> None:
    """Each measured side's mean is the mean of its step walls less the warm-up, and our speed-up by mean is the
    lowest TRL mean over ours: here TRL's colocate side is slower by median (30 s) and faster by mean (20.3 s) than
    `generate` (23.4 and 23.7 s), so each statistic has its own reference. A side without per-step times reads "–"
    and the caption names it."""
    import report as report_py

    data = grid()
    first = data["shapes"][0]
    colocate_side = grpo_step.summarise([40.0, 30.0, 30.0, 1.0], 8, 8)
    first["sides"]["trl-vllm-colocate"] = {"config": "vllm-colocate", **colocate_side}
    first.update(grpo_step.compare(first["sides"]))
    del data["shapes"][1]["sides"]["offset1-interval1"]["step_walls_s"]
    section = report_py.render(data, "grpo_step.json", None)
    table = rows(section)
    assert not foreign_numbers(section, data), foreign_numbers(section, data)

    label = {name: report_py.side_label(name, data) for name in first["sides"]}
    ours, generate, colocate = (table[("1x128", label[n])] for n in ("offset0-interval1", "trl-transformers-generate",
                                                                       "trl-vllm-colocate"))
    ours_mean, colocate_mean = statistics.mean([20.2, 13.49, 21.44]), statistics.mean([30.0, 30.0, 1.0])
    assert ours[1] == "18.4" == number(ours_mean) and colocate[1] == "20.3" == number(colocate_mean)
    # by median 23.41 / 20.2 over generate; by mean 20.33 / 18.38 over colocate
    assert ours[4:] == ["1.16×", "1.11×"] and number(colocate_mean / ours_mean) == "1.11"
    assert generate[4:] == ["reference", "–"] and colocate[4:] == ["–", "reference"]
    for shape in data["shapes"]:
        for name, side in shape["sides"].items():
            if "step_walls_s" in side and "seconds_per_step" in side:
                cells = table[(shape["shape"], report_py.side_label(name, data))]
                assert cells[1] == number(statistics.mean(side["step_walls_s"][1:])), (shape["shape"], name, cells)

    lacking = table[("4x512", report_py.side_label("offset1-interval1", data))]
    assert lacking[1] == "–" and lacking[4] != "–" and lacking[5] == "–"
    assert "no per-step times for 4x512 offset1-interval1" in section
    assert "no per-step times" not in report_py.render(grid(), "grpo_step.json", None)
