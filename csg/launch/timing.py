"""When this process started, for the time from a command to its first training step (``make bench-run``).

:func:`process_start_time` reads the kernel's start time of the process (Linux ``/proc``: its start in clock ticks
after boot, set against the time since boot now, not against the boot time, which ``/proc`` keeps only to the
second), so the time counted includes the interpreter's start and every import before any csg code runs;
elsewhere it is ``None`` and the first step's time is not reported."""

from __future__ import annotations

import os
import time


def process_start_time() -> float | None:
    """The Unix time at which this process started (to the kernel's clock tick, 10 ms), or ``None`` off Linux."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        with open("/proc/uptime") as handle:
            uptime, now = float(handle.read().split()[0]), time.time()
        return now - (uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22 of proc(5): starttime
    except (OSError, ValueError, IndexError):
        return None
