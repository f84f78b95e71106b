"""benchmarks/cpu_by_process.py names the process that used the CPU, and passes its exit status on."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
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


def test_a_child_that_ended_keeps_the_command_line_it_had() -> None:
    """Between its exit and the wait, a child is a zombie whose cmdline reads empty: CI once named it `python`."""
    spec = importlib.util.spec_from_file_location("cpu_by_process", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    last: dict[int, tuple[float, str]] = {}
    module.merge(last, {child.pid: (0.0, f"{sys.executable} -c pass", True)})
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)
    scan = module.cpu_seconds()
    module.merge(last, scan)
    child.wait()
    assert scan[child.pid][2] is False and last[child.pid][1] == f"{sys.executable} -c pass"
