"""benchmarks/cpu_by_process.py names the process that used the CPU, and passes its exit status on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "cpu_by_process.py"


def test_the_busy_child_is_named_with_its_seconds(tmp_path: Path) -> None:
    busy = "import time\nend = time.process_time() + 2.0\nwhile time.process_time() < end: pass\nraise SystemExit(3)"
    out = tmp_path / "cpu.json"
    done = subprocess.run([sys.executable, str(SCRIPT), str(out), "--", sys.executable, "-c", busy], capture_output=True, text=True)
    report = json.loads(out.read_text())
    assert done.returncode == 3 and report["returncode"] == 3
    # The child by its own command line (the script's command line holds the child's code too).
    (child,) = [seconds for name, seconds in report["cpu_s_by_command"].items() if name.startswith(f"{sys.executable} -c")]
    assert 1.9 < child < 3.0, report  # 2 CPU-s, from the child's rusage
