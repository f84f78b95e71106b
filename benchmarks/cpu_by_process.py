"""Run a command and say which processes used the CPU meanwhile: every process's user + system seconds,
sampled from /proc four times a second, summed by command line and written whole as JSON (Linux only).

On 2 shared cores any process beside the engines slows sampling, whatever its priority; this names them
(the driver, Prefect's server, Ray's agents, the engines, the trainer).

    .venv/bin/python benchmarks/cpu_by_process.py OUT.json -- COMMAND [ARGS...]
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> dict[int, tuple[float, str, bool]]:
    """pid -> (CPU seconds so far, name, whether the name is its command line) of every process we may read:
    one without a command line (a kernel thread, or a zombie) is named by its short name."""
    seen = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ").strip()
        except OSError:  # it ended meanwhile
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # the name may hold spaces: split after it
        name = cmdline or stat[stat.find("(") + 1:stat.rfind(")")]
        seen[int(pid)] = ((int(fields[11]) + int(fields[12])) / TICKS, name, bool(cmdline))
    return seen


def merge(last: dict[int, tuple[float, str]], now: dict[int, tuple[float, str, bool]]) -> None:
    """Take the newer seconds, but keep a command line seen before: a zombie's cmdline reads empty."""
    for pid, (seconds, name, is_cmdline) in now.items():
        if not is_cmdline and pid in last:
            name = last[pid][1]
        last[pid] = (seconds, name)


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    out, command = Path(sys.argv[1]), sys.argv[3:]
    before = cpu_seconds()
    last: dict[int, tuple[float, str]] = {}
    started = time.monotonic()
    proc = subprocess.Popen(command)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        merge(last, cpu_seconds())  # a process that ends keeps its last sample
        time.sleep(0.25)  # a process that ends loses what it used after its last sample (not the command itself)
    proc.returncode = os.waitstatus_to_exitcode(status)
    merge(last, cpu_seconds())
    # The command's own seconds are exact: its rusage, however long a /proc scan took on a busy machine.
    last[proc.pid] = (usage.ru_utime + usage.ru_stime, last.get(proc.pid, (0.0, " ".join(command)))[1])
    by_command: collections.Counter[str] = collections.Counter()
    for pid, (seconds, name) in last.items():
        used = seconds - (before[pid][0] if pid in before else 0.0)
        if used > 0:
            by_command[name[:120]] += used
    report = {"command": command, "wall_s": time.monotonic() - started, "returncode": proc.returncode,
              "cpu_count": os.cpu_count(), "cpu_s_by_command": dict(by_command.most_common())}
    out.write_text(json.dumps(report, indent=1))
    for name, seconds in by_command.most_common(15):
        print(f"{seconds:9.1f} s  {name[:100]}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
