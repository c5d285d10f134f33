"""Where a figure came from: the manifest.json every study tool writes beside its results.

Minutes depend on the CPU (a 2-core host with native bf16 ran Pong at twice the frames/s of one without), so
each results folder names the command, the commit, the date and the host that made it.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from ga3c.tools import REPO



def _cpu_info() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return model, flags


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def host() -> dict:
    """The facts about this machine that move a figure in minutes."""
    model, flags = _cpu_info()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    facts = dict(cpu_model=model, cores=cores, native_bf16=bool(flags & {"avx512_bf16", "amx_bf16"}),
                 python=platform.python_version())
    try:
        import torch

        facts.update(torch=torch.__version__,
                     gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    except ImportError:
        facts.update(torch=None, gpu=None)
    return facts


def manifest(tool: str, argv: list[str] | None = None, **extra) -> dict:
    """Command, commit, date and host; `extra` adds the tool's own figures (frames/s, games, budget)."""
    argv = sys.argv[1:] if argv is None else argv
    commit = _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    prefix = f"python {tool}" if tool.endswith(".py") else f"python -m {tool}"
    return dict(tool=tool, command=f"{prefix} " + shlex.join(argv),
                commit=commit, uncommitted_changes=bool(dirty) if dirty is not None else None,
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                host=host(), **extra)


def write_manifest(out: Path, tool: str, argv: list[str] | None = None, **extra) -> Path:
    path = Path(out) / "manifest.json"
    path.write_text(json.dumps(manifest(tool, argv, **extra), indent=1, default=str) + "\n")
    return path
