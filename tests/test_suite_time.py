"""benchmarks/suite_time.py splits one run's junit file into the default run's tests and those marked `full`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import suite_time  # noqa: E402

from tests.full_shards import HALVES  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_quick" time="1.25"/>
<testcase classname="tests.test_a.TestGroup" name="test_grouped" time="2.0"/>
<testcase classname="tests.test_b" name="test_whole_run" time="30.0"><failure message="boom"/></testcase>
<testcase classname="tests.test_b" name="test_skipped" time="0.0"><skipped message="no"/></testcase>
</testsuite></testsuites>"""


def test_the_full_tests_are_counted_apart_and_failures_named(tmp_path: Path) -> None:
    junit = tmp_path / "run.xml"
    junit.write_text(JUNIT)
    report = suite_time.summarise(junit, {"tests/test_b.py::test_whole_run"}, "abc", 40.0, {"median_tokens_per_s": 97.0},
                                  workers=2)
    assert report["machine"]["sampling_tokens_per_s"] == 97.0  # machines here differ up to 2x
    assert report["workers"] == 2  # the tests' seconds add up to more than the wall time on two workers
    assert report["by_side"]["full"] == {"tests": 1, "seconds": 30.0, "failed": 1}
    assert report["by_side"]["default"] == {"tests": 3, "seconds": 3.2, "failed": 0}
    assert report["failed"] == ["tests/test_b.py::test_whole_run"]
    assert report["slowest"][0]["id"] == "tests/test_b.py::test_whole_run"
    assert "tests/test_a.py::TestGroup::test_grouped" in {c["id"] for c in report["slowest"]}
    assert report["per_file"]["tests/test_a.py"] == {"seconds": 3.2, "tests": 2}


def test_the_projects_full_tests_are_collected_and_each_module_is_in_one_half() -> None:
    ids = suite_time.full_ids()
    assert "tests/test_learning.py::test_a_few_grpo_steps_raise_held_out_reward" in ids
    assert not any("test_suite_time" in i for i in ids)
    # CI runs the halves one after the other (scripts/test.sh --ci): a module in neither would run twice, one listed
    # but with no `full` test left is a stale entry
    modules = {Path(i.split("::")[0]).stem for i in ids}
    assert not HALVES[0] & HALVES[1]
    assert modules == HALVES[0] | HALVES[1], (modules ^ (HALVES[0] | HALVES[1]))
