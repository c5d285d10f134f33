"""Test helpers, imported as a plain module (`from helpers import ...`): compose configs like Hydra does, run train.py as a
user would, find leftover children."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

import ga3c  # noqa: F401  registers the ${machine:...} resolver conf/config.yaml uses
from ga3c.shared_memory import segment_maker

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
# Every game file but the Atari base (game=atari needs game.id=...; tests/test_games.py runs it)
GAMES = sorted(p.stem for p in (CONF / "game").glob("*.yaml") if p.stem != "atari")
ATARI_GAMES = [str(g) for g in OmegaConf.load(CONF / "suite.yaml").games]   # the paper's Table 3
NETS = sorted(p.stem for p in (CONF / "net").glob("*.yaml"))


def compose_config(*overrides: str, output_dir: Path | None = None):
    """The config train.py would see (without hydra's runtime: output_dir is set explicitly)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        overrides = list(overrides) + [f"output_dir={output_dir or '/tmp/ga3c-unused'}"]
        return compose(config_name="config", overrides=overrides)


def descendants(pid: int) -> list[int]:
    """Live descendant pids of `pid` (from /proc; no psutil needed)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                state = stat.rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError, ValueError):
                continue
            if state != "Z":
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def processes_with(marker: str) -> list[int]:
    """Live pids whose environment holds GA3C_TEST_MARKER=marker: a run and every process it started
    (agents, the forkserver, W&B's service) inherit it, even once orphaned."""
    pids, needle = [], f"GA3C_TEST_MARKER={marker}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def train_command(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(REPO / "train.py"), f"hydra.run.dir={run_dir}", "log.every_seconds=1",
            "log.progress=false", *overrides]


def run_train(run_dir: Path, *overrides: str, timeout: float = 300, check: bool = True,
              env: dict | None = None) -> subprocess.CompletedProcess:
    """Run train.py as a subprocess; fail with its output if it fails (when check). Its processes carry
    GA3C_TEST_MARKER=<run_dir> so leftovers can be found. A run still going after `timeout` is asked for
    every thread's stack (SIGUSR1: train.py and the agents dump them to stderr), killed, and the test fails
    with those stacks: a hang that happens once in many runs is then diagnosable from the CI log."""
    environment = dict(os.environ, GA3C_TEST_MARKER=str(run_dir), **(env or {}))
    command = train_command(run_dir, *overrides)
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        dump_stacks(str(run_dir))
        try:
            stdout, stderr = process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        kill_marked(str(run_dir))
        pytest.fail(f"train.py still running after {timeout:.0f} s; stacks (SIGUSR1) and output:\n"
                    f"{stdout[-3000:]}\n{stderr[-12000:]}")
    result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    if check and result.returncode != 0:
        pytest.fail(f"train.py failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}")
    return result


def dump_stacks(marker: str) -> None:
    """SIGUSR1 to the run's Python processes (train.py, the forkserver, agents): faulthandler prints their
    threads' stacks to the run's stderr, and they go on. One process at a time: dumps written at once to the
    same pipe interleave mid-line (seen in CI: 'in run_agent' split by another agent's 'Current thread')."""
    for pid in processes_with(marker):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"python" in command.split(b"\0")[0] and b"resource_tracker" not in command:  # not W&B's service
                os.kill(pid, signal.SIGUSR1)
                time.sleep(0.3)  # a dump takes well under a millisecond; this keeps them apart
        except OSError:  # gone meanwhile
            continue
    time.sleep(2)


def kill_marked(marker: str) -> None:
    """SIGKILL to every live process of the run marked `marker`."""
    for pid in processes_with(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def read_summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def wait_until(predicate, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def leaked_shm_segments(before: set[str], timeout: float = 10.0) -> list[str]:
    """Segments that appeared in /dev/shm since `before` and are still there after `timeout`, except another live
    process's: one it maps, or one a live process other than this one made (ga3c names its segments
    `ga3c_<pid>_...`). Tests run side by side under pytest-xdist, and the other worker's run may hold a segment
    it has already unmapped but not yet unlinked. This process's own segments excuse nothing."""
    def alive(pid: int) -> bool:
        return pid != os.getpid() and Path(f"/proc/{pid}").exists()

    def unmapped() -> list[str]:
        mapped = set()
        for maps in Path("/proc").glob("[0-9]*/maps"):
            if maps.parent.name == str(os.getpid()):
                continue
            try:
                mapped |= {line.rsplit("/dev/shm/", 1)[1].split()[0] for line in maps.read_text().splitlines()
                           if "/dev/shm/" in line}
            except (OSError, IndexError):
                continue
        present = set(os.listdir("/dev/shm"))
        made_by_live = {n for n in present if (maker := segment_maker(n)) is not None and alive(maker)}
        return sorted(present - before - mapped - made_by_live)

    wait_until(lambda: not unmapped(), timeout)
    return unmapped()


def assert_no_leftovers(marker: str, timeout: float = 10.0) -> None:
    """No process of the run marked `marker` may outlive it (give them `timeout` to exit); kill any that do."""
    wait_until(lambda: not processes_with(marker), timeout)
    leftovers = processes_with(marker)
    kill_marked(marker)
    assert not leftovers, f"processes left behind: {leftovers}"
