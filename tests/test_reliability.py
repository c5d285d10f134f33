"""Reliability: faults during a run, stopping, atomic checkpoints, no leaks across jobs, bad input."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from helpers import (REPO, assert_no_leftovers, compose_config, descendants, dump_stacks, leaked_shm_segments,
                     read_summary, run_train, train_command, wait_until)
from wandb_records import exit_code


def balanced(summary: dict) -> bool:
    return summary["produced_steps"] == (summary["trained_steps"] + summary["discarded_steps"]
                                         + summary["in_flight_steps"]) and summary["in_flight_steps"] == 0


def start_run(run_dir: Path, *overrides: str) -> subprocess.Popen:
    env = dict(os.environ, GA3C_TEST_MARKER=str(run_dir))
    return subprocess.Popen(train_command(run_dir, *overrides), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def summary_when(run_dir: Path, predicate, timeout: float) -> dict:
    def check():
        try:
            return predicate(json.loads((run_dir / "summary.json").read_text()))
        except (OSError, ValueError, KeyError):
            return False
    assert wait_until(check, timeout), f"condition never met; last summary: {(run_dir / 'summary.json').exists()}"
    return read_summary(run_dir)


def agent_pids(train_pid: int) -> list[int]:
    """Agent processes: grandchildren of train.py through the forkserver."""
    found = []
    for pid in descendants(train_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if b"forkserver" in cmdline and parent != train_pid:
            found.append(pid)
    return found


# --- faults during a run -------------------------------------------------------------------------------
@pytest.mark.slow
def test_killed_agent_is_replaced_and_training_continues(tmp_path):
    process = start_run(tmp_path, "game=cartpole", "max_frames=null", "wandb.mode=disabled")
    try:
        before = summary_when(tmp_path, lambda s: s["updates"] > 20, 120)
        victims = agent_pids(process.pid)
        assert len(victims) == before["agents"]
        os.kill(victims[0], signal.SIGKILL)
        after = summary_when(tmp_path, lambda s: s["agent_restarts"] >= 1 and s["updates"] > before["updates"] + 50,
                             30)
        assert wait_until(lambda: len(agent_pids(process.pid)) == before["agents"], 10)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    output = process.stdout.read()
    assert process.returncode == 0, output[-3000:]
    assert "died" in output and "starting a replacement" in output
    final = read_summary(tmp_path)
    assert final["agent_restarts"] == 1 and final["stop_reason"] == "SIGTERM", output[-3000:]
    assert final["status"] == "finished", output[-5000:]
    assert final["updates"] > after["updates"] - 1
    assert balanced(final), final
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
def test_env_exception_in_an_agent_is_logged_and_the_agent_replaced(tmp_path):
    marker = tmp_path / "fault-fired"
    run_train(tmp_path, "game=cartpole", "game.id=tests.faults:Faulty-v0", "max_frames=20000", "wandb.mode=disabled",
              env={"GA3C_FAULT_MARKER": str(marker), "GA3C_FAULT_STEP": "60"})
    assert marker.exists()
    summary = read_summary(tmp_path)
    assert summary["agent_restarts"] == 1 and summary["status"] == "finished" and summary["frames"] >= 20000
    assert balanced(summary), summary
    log = (tmp_path / "train.log").read_text()
    assert "injected env fault: the emulator caught fire" in log and "starting a replacement" in log
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
def test_predictor_exception_stops_the_run_with_the_error_and_a_checkpoint(tmp_path):
    result = run_train(tmp_path, "game=cartpole", "net._target_=tests.fault_nets.RaisingNet", "~net.init",
                       "+net.after=300", "max_frames=null", "wandb.mode=offline", check=False, timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "predictor-0 raised" in result.stderr and "injected predictor fault" in result.stderr + result.stdout
    summary = read_summary(tmp_path)
    assert summary["status"] == "failed"
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == summary["updates"]
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    result = run_train(tmp_path, "game=cartpole", "net._target_=tests.fault_nets.NaNNet", "~net.init", "+net.after=400",
                       "checkpoint.every_minutes=0.01", "max_frames=null", "wandb.mode=disabled", check=False,
                       timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("ga3c: error: loss is nan at update 400"), message
    assert "Traceback" not in result.stderr
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert 0 < checkpoint["global_step"] <= 400
    assert all(torch.isfinite(v).all() for v in checkpoint["state_dict"].values())
    # periodic checkpoints are named so that the documented resume command takes them unquoted
    periodic = sorted((tmp_path / "checkpoints").glob("step-*.ckpt"))
    assert periodic and not list((tmp_path / "checkpoints").glob("*=*"))
    assert compose_config(f"ckpt_path={periodic[0]}").ckpt_path == str(periodic[0])
    assert read_summary(tmp_path)["status"] == "failed"
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ga3c", "ceiling"])
def test_a_stalled_run_fails_and_is_recorded_as_failed(tmp_path, algo):
    """Every env stuck (no agent steps for stall_seconds): the run stops with the reason instead of hanging, its
    summary says failed, its W&B run is finished as failed (exit code 1), nothing is left behind."""
    result = run_train(tmp_path, f"algo={algo}", "game=cartpole", "game.id=tests.faults:Hanging-v0", "agents=2",
                       "stall_seconds=3", "max_frames=null", "wandb.mode=offline", check=False, timeout=150)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "no agent produced experience for 3 s" in result.stderr + result.stdout
    assert read_summary(tmp_path)["status"] == "failed"
    (wandb_file,) = (tmp_path / "wandb").glob("offline-run-*/*.wandb")
    assert exit_code(wandb_file) == 1
    assert_no_leftovers(str(tmp_path))


@pytest.mark.slow
def test_a_failed_a3c_run_is_recorded_as_failed_in_wandb(tmp_path):
    result = run_train(tmp_path, "algo=a3c", "game=cartpole", "agents=2", "net._target_=tests.fault_nets.NaNNet",
                       "~net.init", "+net.after=100", "max_frames=null", "wandb.mode=offline", check=False, timeout=150)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "loss is nan" in result.stderr
    assert read_summary(tmp_path)["status"] == "failed"
    (wandb_file,) = (tmp_path / "wandb").glob("offline-run-*/*.wandb")
    assert exit_code(wandb_file) == 1
    assert_no_leftovers(str(tmp_path))


def test_checkpoint_writes_are_atomic(tmp_path):
    """Kill a process while it writes checkpoints with Lightning's writer (the one our runs use): the file on
    disk is always a complete, loadable checkpoint."""
    path = tmp_path / "last.ckpt"
    writer = (
        "import sys, torch\n"
        "from lightning_fabric.utilities.cloud_io import _atomic_save\n"
        "i = 0\n"
        "while True:\n"
        "    i += 1\n"
        "    _atomic_save({'step': i, 'weights': torch.full((4_000_000,), float(i))}, sys.argv[1])\n"
        "    print(i, flush=True)\n")
    for delay in (0.9, 1.3, 1.7):
        process = subprocess.Popen([sys.executable, "-c", writer, str(path)], stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "1" or path.exists()
        time.sleep(delay)  # mid-way through a later write
        process.kill()
        process.wait()
        checkpoint = torch.load(path, weights_only=False)
        assert (checkpoint["weights"] == checkpoint["step"]).all()
    assert not [p for p in tmp_path.iterdir() if p.name != "last.ckpt" and p.stat().st_size > 10_000_000]


# --- stopping ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sigterm_stops_cleanly(tmp_path):
    process = start_run(tmp_path, "game=cartpole", "max_frames=null", "wandb.mode=offline")
    try:
        summary_when(tmp_path, lambda s: s["updates"] > 10, 120)
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        process.wait(timeout=30)
        assert_no_leftovers(str(tmp_path), timeout=max(0.5, 10 - (time.monotonic() - sent)))
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    summary = read_summary(tmp_path)
    assert summary["status"] == "finished" and summary["stop_reason"] == "SIGTERM" and balanced(summary)
    assert (tmp_path / "checkpoints" / "last.ckpt").exists()
    assert list((tmp_path / "wandb").glob("offline-run-*/*.wandb"))


@pytest.mark.slow
def test_second_ctrl_c_exits_at_once_without_children(tmp_path):
    process = start_run(tmp_path, "agents=4", "max_frames=null", "wandb.mode=disabled")
    try:
        summary_when(tmp_path, lambda s: s["frames"] > 0, 120)
        interrupt_twice_and_expect_a_prompt_exit(process, tmp_path)
    finally:
        if process.poll() is None:
            process.kill()


def interrupt_twice_and_expect_a_prompt_exit(process: subprocess.Popen, run_dir: Path) -> None:
    """Two SIGINTs 50 ms apart: out within 10 s, nothing left behind."""
    process.send_signal(signal.SIGINT)
    time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=10)
    assert_no_leftovers(str(run_dir), timeout=5)
    assert process.returncode in (0, 130)  # 0 if the graceful stop finished before the second signal


@pytest.mark.slow
def test_sigusr1_prints_every_threads_stack_and_the_run_goes_on(tmp_path):
    """How a rare hang is diagnosed (run_train does this to a test run that overstays its timeout): SIGUSR1
    makes train.py and its agents print where each of their threads is, and the run carries on."""
    process = start_run(tmp_path, "game=cartpole", "agents=2", "max_frames=null", "wandb.mode=disabled")
    try:
        summary_when(tmp_path, lambda s: s["updates"] > 10, 120)
        dump_stacks(str(tmp_path))
        updates = read_summary(tmp_path)["updates"]
        summary_when(tmp_path, lambda s: s["updates"] > updates, 60)   # still training
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
        assert_no_leftovers(str(tmp_path))
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output[-3000:]
    assert "Thread 0x" in output
    assert "predictor.py" in output and "trainer.py" in output   # train.py's threads
    assert "in run_agent" in output                              # an agent process's stack


def test_stopping_the_forkserver_is_bounded_even_while_it_is_busy():
    """multiprocessing's own stop waits for ever on a forkserver that does not answer (here: still importing
    its preload; in the wild: a double Ctrl-C during start-up); ours kills it after the timeout and reaps it."""
    from multiprocessing import forkserver

    from ga3c.server import stop_forkserver

    stop_forkserver()  # whatever an earlier test left running
    forkserver.set_forkserver_preload(["slow_import"])
    try:
        forkserver.ensure_running()
        pid = forkserver._forkserver._forkserver_pid
        started = time.monotonic()
        stop_forkserver(timeout=0.5)
        assert time.monotonic() - started < 3
        assert not Path(f"/proc/{pid}").exists()   # killed and reaped, not a zombie
        stop_forkserver()                          # a second stop is a no-op
    finally:
        forkserver.set_forkserver_preload([])


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ga3c", "a3c", "ceiling"])
def test_double_ctrl_c_while_agents_start_exits_at_once(tmp_path, algo):
    """Two SIGINTs the moment the forkserver exists (agents are being started): out within 10 s, nothing left.
    This once hung in A3C: the exit-at-once path waited for a forkserver that was still busy."""
    process = start_run(tmp_path, f"algo={algo}", "game=pong", "agents=2", "max_frames=null", "wandb.mode=disabled")
    try:
        def forkserver_up():
            try:
                return any(b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes() for p in descendants(process.pid))
            except OSError:  # a process that just went
                return False
        assert wait_until(forkserver_up, 120, interval=0.02), "the run never started its agents"
        interrupt_twice_and_expect_a_prompt_exit(process, tmp_path)
    finally:
        if process.poll() is None:
            process.kill()


def test_the_leak_check_sees_a_segment_nobody_unlinked_and_not_one_in_use():
    """leaked_shm_segments (tests/helpers.py), the check behind the no-leak tests: a segment closed but never
    unlinked is a leak, also when this process still maps it; one another live process maps, or made under ga3c's
    naming and has not yet unlinked, is that run's; once its maker is gone, it is a leak."""
    import subprocess
    import sys
    from multiprocessing import shared_memory

    from ga3c.shared_memory import segment_name

    before = set(os.listdir("/dev/shm"))
    ours = shared_memory.SharedMemory(create=True, size=4096)
    theirs = subprocess.Popen([sys.executable, "-c", "import sys; from multiprocessing import shared_memory as s; "
                               "from ga3c.shared_memory import segment_name as n; "
                               "m = s.SharedMemory(create=True, size=4096); u = s.SharedMemory(create=True, size=64, name=n()); "
                               "u.close(); print(m.name, u.name, flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    orphan = shared_memory.SharedMemory(create=True, size=64, name=segment_name().replace(f"_{os.getpid()}_", "_999999999_"))
    orphan.close()
    other, other_unmapped = theirs.stdout.readline().split()
    try:
        assert ours.name in leaked_shm_segments(before, timeout=0.5)   # ours, though still mapped here
        ours.close()
        found = leaked_shm_segments(before, timeout=0.5)
        assert ours.name in found and orphan.name in found             # its maker (no such pid) is gone
        assert other not in found and other_unmapped not in found      # a live process's
    finally:
        ours.unlink()
        orphan.unlink()
        theirs.communicate("")
        for name in (other, other_unmapped):
            Path("/dev/shm", name).unlink(missing_ok=True)


def test_orphaned_segments_of_dead_makers_are_removed_and_nothing_else(tmp_path):
    """remove_orphaned_segments: a ga3c segment whose maker pid is gone and that is older than the minimum age is
    unlinked; a fresh one (a run starting right now), a live maker's and another program's stay."""
    from ga3c.shared_memory import remove_orphaned_segments

    dead, live = "ga3c_999999999_0badf00d", f"ga3c_{os.getpid()}_0badf00d"
    fresh, foreign = "ga3c_999999998_0badf00d", "psm_999999999"
    for name in (dead, live, fresh, foreign):
        (tmp_path / name).write_bytes(b"\0" * 64)
    for name in (dead, live, foreign):
        os.utime(tmp_path / name, (time.time() - 120, time.time() - 120))
    assert remove_orphaned_segments(str(tmp_path), min_age_seconds=60) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live, fresh, foreign])
    assert remove_orphaned_segments(str(tmp_path / "missing")) == []


@pytest.mark.slow
def test_a_run_killed_with_sigkill_leaves_a_segment_the_next_run_removes(tmp_path):
    """SIGKILL to the run's whole process group (multiprocessing's resource tracker, which would otherwise
    unlink it, included: what a container's or a job scheduler's kill does) leaves its segment; the next run
    on the machine removes the orphan (and says so in one line)."""
    first, second = tmp_path / "killed", tmp_path / "next"
    before = set(os.listdir("/dev/shm"))
    process = subprocess.Popen(train_command(first, "game=cartpole", "max_frames=null", "wandb.mode=disabled"),
                               cwd=REPO, env=dict(os.environ, GA3C_TEST_MARKER=str(first)), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        summary_when(first, lambda s: s["frames"] > 0, 120)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        assert_no_leftovers(str(first), timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    orphans = [n for n in set(os.listdir("/dev/shm")) - before if n.startswith(f"ga3c_{process.pid}_")]
    assert len(orphans) == 1, orphans
    orphan = Path("/dev/shm", orphans[0])
    try:
        os.utime(orphan, (time.time() - 120, time.time() - 120))   # as if killed a while ago
        run_train(second, "game=cartpole", "max_frames=2000", "wandb.mode=disabled")
        assert not orphan.exists()   # (its one-line warning is not asserted: a run in another test worker may
                                     # start first and remove it)
    finally:
        orphan.unlink(missing_ok=True)


def test_three_sequential_jobs_in_one_process_leave_nothing_behind(tmp_path):
    """What Hydra's basic launcher does in a multirun: after each job, no child process, no extra thread,
    no shared-memory segment, no open W&B run."""
    import wandb

    from ga3c.algos import train

    shm_before = set(os.listdir("/dev/shm"))
    threads_before = threading.active_count()

    def children():  # multiprocessing's resource tracker is one helper per Python process, not per job
        return [p for p in descendants(os.getpid())
                if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]

    for job in range(3):
        cfg = compose_config("game=cartpole", "max_frames=3000", "log.progress=false", "wandb.mode=offline",
                             f"seed={job}", output_dir=tmp_path / str(job))
        summary = train(cfg)
        assert summary["frames"] >= 3000
        assert wait_until(lambda: not children(), 10), [Path(f"/proc/{p}/cmdline").read_bytes() for p in children()]
        ours = lambda: [t for t in threading.enumerate() if t.name.startswith(("predictor", "trainer", "watchdog"))]  # noqa: E731
        assert wait_until(lambda: not ours(), 10), ours()
        if job == 0:  # libraries start a few process-wide helper threads once (OpenTelemetry exporters)
            threads_before = max(threads_before, threading.active_count())
        assert wait_until(lambda: threading.active_count() <= threads_before, 10), threading.enumerate()
        assert not leaked_shm_segments(shm_before)
        assert wandb.run is None
    assert len({p.name for d in tmp_path.iterdir() for p in (d / "wandb").glob("offline-run-*")}) == 3


# --- a failure at any stage of start-up releases everything ------------------------------------------------
def _injected(*args, **kwargs):
    raise RuntimeError("injected start-up fault")


def _after(original, error: BaseException):
    """`original`, then fail: the stage did its work (started agents, a W&B run), then something went wrong."""
    def wrapper(*args, **kwargs):
        original(*args, **kwargs)
        raise error
    return wrapper


def inject(stage: str, monkeypatch, run_dir: Path) -> None:
    """Make one stage of GA3C's start-up (ga3c/algos/ga3c.py, in order) fail."""
    import errno

    import pytorch_lightning as pl
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    import ga3c.algos.ga3c as ga3c_run
    import ga3c.server as server

    if stage == "pipes":  # the shared-memory block exists, its queues cannot be made
        monkeypatch.setattr(server, "RecordPipe", lambda dtype: (_ for _ in ()).throw(
            OSError(errno.EMFILE, "Too many open files")))
    elif stage == "monitor":
        monkeypatch.setattr(ga3c_run, "Monitor", _injected)
    elif stage == "logger":
        monkeypatch.setattr(ga3c_run, "make_logger", _injected)
    elif stage == "trainer":  # Lightning refuses an argument
        def refuse(*args, **kwargs):
            raise MisconfigurationException("injected: Lightning refuses an argument")
        monkeypatch.setattr(pl, "Trainer", refuse)
    elif stage == "wandb":  # the W&B run is up
        monkeypatch.setattr(ga3c_run, "start_wandb", _after(ga3c_run.start_wandb, RuntimeError("injected W&B fault")))
    elif stage == "agents":  # agent processes, predictor and trainer threads are up
        monkeypatch.setattr(server.Server, "start", _after(server.Server.start, RuntimeError("injected start fault")))
    elif stage == "watchdog":  # the supervising thread itself raises: the run must fail, not run on unsupervised
        original = server.Server._reap

        def reap(self, timeout):
            if threading.current_thread().name == "watchdog":
                raise RuntimeError("injected watchdog fault")
            return original(self, timeout)
        monkeypatch.setattr(server.Server, "_reap", reap)
    elif stage in ("disk full", "final checkpoint"):  # every checkpoint, or only the one after training
        from pytorch_lightning.trainer.states import TrainerStatus

        original = pl.Trainer.save_checkpoint

        def save(trainer, *args, **kwargs):
            if stage == "disk full" or trainer.state.status == TrainerStatus.FINISHED:
                raise OSError(errno.ENOSPC, "No space left on device")
            return original(trainer, *args, **kwargs)
        monkeypatch.setattr(pl.Trainer, "save_checkpoint", save)
    elif stage == "periodic checkpoint":  # the checkpoint directory cannot be made (a file is in the way)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "checkpoints").write_text("in the way")


STAGES = {  # stage: (extra overrides, what train() raises, message)
    "pipes": ([], "RunFailed", "start-up failed: .*Too many open files"),
    "monitor": ([], "RunFailed", "injected start-up fault"),
    "logger": ([], "RunFailed", "injected start-up fault"),
    "trainer": ([], "ConfigError", "trainer: Lightning refused the settings: injected"),
    "wandb": ([], "RunFailed", "injected W&B fault"),
    "agents": ([], "RunFailed", "injected start fault"),
    "thread": (["net._target_=tests.fault_nets.RaisingNet", "~net.init", "+net.after=30", "max_frames=null"],
               "RunFailed", "predictor-0 raised"),
    "disk full": ([], "RunFailed", "No space left on device"),
    "final checkpoint": ([], "RunFailed", "the final checkpoint could not be written: .*No space left"),
    "periodic checkpoint": (["checkpoint.every_minutes=0.001", "max_frames=null"], "RunFailed", "training raised"),
    "watchdog": (["max_frames=null"], "RunFailed", "watchdog raised"),
}


def record_shared_memory(monkeypatch) -> list[str]:
    """The names of the shared-memory segments the code under test creates, from now on."""
    import ga3c.shared_memory as shared_memory

    created = []

    class RecordedSharedMemory(shared_memory.SharedMemory):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if kwargs.get("create"):
                created.append(self.name)

    monkeypatch.setattr(shared_memory, "SharedMemory", RecordedSharedMemory)
    return created


def children() -> list[int]:
    """This process's live children (multiprocessing's resource tracker is one helper per process, not per run)."""
    return [p for p in descendants(os.getpid()) if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]


@pytest.mark.parametrize("stage", STAGES)
def test_a_failure_at_any_stage_of_start_up_releases_everything(tmp_path, monkeypatch, stage):
    """In-process (as a multirun job runs): after the failure no child process, no thread of ours, no
    shared-memory segment, no W&B run left open or unfinished on disk; the error says what failed."""
    import wandb

    from ga3c.algos import train
    from wandb_records import unfinished_runs

    created = record_shared_memory(monkeypatch)
    inject(stage, monkeypatch, tmp_path)
    overrides, error_type, message = STAGES[stage]
    cfg = compose_config("game=cartpole", "agents=2", "max_frames=3000", "log.progress=false", "wandb.mode=offline",
                         *overrides, output_dir=tmp_path)
    with pytest.raises(Exception, match=message) as raised:
        train(cfg)
    assert type(raised.value).__name__ == error_type, repr(raised.value)

    def our_threads():
        return [t for t in threading.enumerate() if t.name.startswith(("predictor", "trainer", "watchdog"))]

    assert wait_until(lambda: not children(), 10), [Path(f"/proc/{p}/cmdline").read_bytes() for p in children()]
    assert wait_until(lambda: not our_threads(), 10), our_threads()
    assert created, "the run never made its shared memory: the stage failed too early to test anything"
    assert not [name for name in created if Path("/dev/shm", name).exists()]
    assert wandb.run is None
    assert not unfinished_runs(tmp_path)
    if stage in ("wandb", "agents", "thread", "disk full", "final checkpoint"):  # the W&B run was up: finished, on disk
        assert list(tmp_path.glob("wandb/offline-run-*/*.wandb"))
    if (tmp_path / "summary.json").exists():
        assert read_summary(tmp_path)["status"] == "failed"


@pytest.mark.parametrize("stage", ["monitor", "logger", "agents"])
def test_a_failure_in_the_ceilings_start_up_releases_everything(tmp_path, monkeypatch, stage):
    """algo=ceiling (the env-only benchmark arm) frees its shared memory and processes however it fails."""
    import ga3c.algos.ceiling as ceiling
    import ga3c.server as server
    from ga3c.algos import train

    created = record_shared_memory(monkeypatch)
    if stage == "agents":
        monkeypatch.setattr(server.Server, "start", _after(server.Server.start, RuntimeError("injected start fault")))
    else:
        monkeypatch.setattr(ceiling, {"monitor": "Monitor", "logger": "make_logger"}[stage], _injected)
    cfg = compose_config("algo=ceiling", "game=cartpole", "agents=2", "max_frames=3000", "log.progress=false",
                         "wandb.mode=offline", output_dir=tmp_path)
    with pytest.raises(RuntimeError, match="injected"):
        train(cfg)
    assert wait_until(lambda: not children(), 10)
    assert created and not [name for name in created if Path("/dev/shm", name).exists()]
