"""OS-level names for the run's threads, so `top -H` and /proc/<pid>/task/*/comm tell them apart and
ga3c.tools.bench can read each one's CPU time from outside the process (Python does not pass a thread's
name to the OS)."""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

PR_SET_NAME = 15   # prctl(2): set the calling thread's name (15 bytes at most)


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` at the OS level (Linux; a no-op elsewhere or where prctl is missing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass
