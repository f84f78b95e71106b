"""benchmarks/suite_pair.py reads pytest's own junit files: time per test file, classes folded into their file."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks import suite_pair

TESTS = '''
import time

def test_quick():
    pass

class TestGroup:
    def test_slow(self):
        time.sleep(0.3)
'''


def _junit(tmp_path: Path, name: str, body: str) -> Path:
    folder = tmp_path / name
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "test_some.py").write_text(body)
    junit = tmp_path / f"{name}.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "tests"],
                   cwd=folder, check=True, capture_output=True)
    return junit


def test_a_pair_is_summed_per_test_file(tmp_path: Path) -> None:
    before = _junit(tmp_path, "before", TESTS)
    after = _junit(tmp_path, "after", TESTS.replace("time.sleep(0.3)", "pass"))
    out = tmp_path / "pair.json"
    subprocess.run([sys.executable, suite_pair.__file__, "--junit", str(before), str(after), "--commits", "aaa", "bbb",
                    "--out", str(out)], check=True, capture_output=True)
    result = json.loads(out.read_text())
    assert list(result["files"]) == ["tests/test_some.py"]  # the class's test counted in its file
    assert result["tests"] == {"before": 2, "after": 2}
    # the totals are the junit files' own times, summed (not a clock of ours)
    seconds = {side: round(sum(float(case.get("time")) for case in ET.parse(junit).iter("testcase")), 1)
               for side, junit in (("before", before), ("after", after))}
    assert result["seconds_in_tests"] == seconds and seconds["before"] >= 0.3  # the slept test is in it
    assert result["after_over_before"] == round(seconds["after"] / seconds["before"], 3)
    assert result["runs"]["after"] == {"commit": "bbb"}
