"""The server: owns the shared memory, the two queues, the agent processes and the predictor and trainer
threads; changes their counts while the run goes; replaces agents that die; stops everything cleanly."""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import signal
import threading
import time

import numpy as np

from ga3c.agent import run_agent
from ga3c.predictor import Predictor
from ga3c.shared_memory import (ANSWER_READY, ANSWER_STOP, PREDICTION_REQUEST, ROLLOUT, RecordPipe, SharedBuffers,
                               remove_orphaned_segments)
from ga3c.thread_names import name_os_thread
from ga3c.trainer import TrainerThread

log = logging.getLogger(__name__)


def process_context() -> mp.context.BaseContext:
    """forkserver: children start from a clean, torch-free process with the env modules preloaded, so an
    agent starts in milliseconds and never inherits the learner's threads (fork) nor re-imports (spawn)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["ga3c.agent"])
    return ctx


def stop_forkserver(timeout: float = 5.0) -> None:
    """The forkserver outlives its children; end it so a run leaves no process behind. It is asked to go (EOF
    on its alive pipe) and killed if it has not gone within `timeout` seconds (0: at once, for the exit-at-once
    paths). By hand, not multiprocessing's `_stop()`: that waits for ever, and a forkserver still importing its
    preload, or serving a start a signal interrupted, does not answer (a double Ctrl-C during start-up hung)."""
    from multiprocessing import forkserver, util

    server = forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return
    try:
        if server._forkserver_alive_fd is not None:
            os.close(server._forkserver_alive_fd)
        deadline = time.monotonic() + timeout
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.02)
    except OSError:  # already reaped or gone
        pass
    address = server._forkserver_address
    server._forkserver_alive_fd = server._forkserver_pid = server._forkserver_address = None
    if address and not util.is_abstract_socket_namespace(address):
        try:
            os.unlink(address)
        except OSError:
            pass


class AgentHandle:
    def __init__(self, process: mp.Process, answer_fd: int, generation: int):
        self.process, self.answer_fd, self.generation = process, answer_fd, generation


class RunControl:
    """Stopping and failing, as every run does it (GA3C's Server, A3C's run): the first reason to stop is the one
    reported, the first error is the one train.py raises; `stopping` is set once, for threads to wait on."""

    def __init__(self):
        self.stopping = threading.Event()
        self.stop_reason: str | None = None
        self.error: BaseException | None = None

    def request_stop(self, reason: str) -> None:
        if not self.stopping.is_set():
            self.stop_reason = reason
            log.info("stopping: %s", reason)
            self.stopping.set()

    def fail(self, message: str, error: BaseException) -> None:
        """A part of the run failed: stop the run and let train.py report the error."""
        log.error(message)
        if self.error is None:
            self.error = error
        self.request_stop(message.splitlines()[0])


class Server(RunControl):
    """Everything between the envs and the learner. `set_counts` is how the auto-tuner acts."""

    def __init__(self, cfg, learner, counters, obs_shape, obs_dtype, max_agents: int, random_actions: bool = False):
        self.cfg, self.learner, self.counters = cfg, learner, counters
        self.random_actions = random_actions
        self.max_agents = max_agents
        core = int(getattr(learner.model, "core_size", 0)) if learner is not None else 0   # a recurrent net's state
        if orphans := remove_orphaned_segments():
            log.warning("removed %d shared-memory segment(s) left in /dev/shm by killed runs: %s",
                        len(orphans), ", ".join(orphans))
        self.buffers = SharedBuffers.create(max_agents, cfg.rollout_slots, cfg.t_max, obs_shape, obs_dtype, core)
        self.prediction_queue = self.training_queue = None
        try:  # the segment exists now: a failure below must not leave it in /dev/shm
            self.prediction_queue = RecordPipe(PREDICTION_REQUEST)
            self.training_queue = RecordPipe(ROLLOUT)
        except BaseException:
            self.close()
            raise
        self.batch_queue: queue.Queue = queue.Queue(maxsize=cfg.batch_queue_size)
        self.generations = np.zeros(max_agents, np.uint16)   # bumped each time a slot gets a new agent
        self.agents: list[AgentHandle | None] = [None] * max_agents
        self.counts = (0, 0, 0)  # agents, predictors, trainers as last set (reported even after shutdown)
        self.predictors: list[Predictor] = []
        self.trainers: list[TrainerThread] = []
        self.all_predictors: list[Predictor] = []  # retired ones too, so counters never go backwards
        self.all_trainers: list[TrainerThread] = []
        self.steps_to_learner = 0     # steps handed to Lightning this run (it prefetches one batch ahead)
        self._trained_at_start = 0
        RunControl.__init__(self)
        self.monitor = None
        self.ctx = process_context()
        self._lock = threading.RLock()
        self._retired_steps = 0  # produced steps of agents whose slot was reused since
        self._retiring: dict[int, AgentHandle] = {}  # stopped agents not yet joined, by slot
        self._watchdog = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self.game = dict(cfg.game)
        self.seed_counter = 0

    # --- counts --------------------------------------------------------------------------------------
    @property
    def num_agents(self) -> int:
        return sum(a is not None for a in self.agents)

    def start(self) -> None:
        self._trained_at_start = self.counters["trained_steps"]  # after a checkpoint restored the counters
        self.set_counts(self.cfg.agents, self.cfg.predictors, self.cfg.trainers)
        self._watchdog.start()

    def set_counts(self, agents: int, predictors: int, trainers: int) -> None:
        """Add or remove agents, predictors and trainers now; nothing waits for an episode to end."""
        with self._lock:
            if self.stopping.is_set():
                return
            if not (1 <= agents <= self.max_agents and predictors >= 1 and trainers >= 1):
                raise ValueError(f"counts out of range: agents={agents} (1..{self.max_agents}), "
                                 f"predictors={predictors}, trainers={trainers}")
            self.counts = (agents, predictors, trainers)
            while len(self.predictors) < predictors:
                p = Predictor(self, len(self.all_predictors), self.cfg.prediction_max_batch)
                self.predictors.append(p)
                self.all_predictors.append(p)
                p.start()
            while len(self.predictors) > predictors:
                self.predictors.pop().stopping.set()   # finishes its current batch, then exits
            while len(self.trainers) < trainers:
                t = TrainerThread(self, len(self.all_trainers), self.cfg.training_min_batch,
                                  self.cfg.training_max_batch)
                self.trainers.append(t)
                self.all_trainers.append(t)
                t.start()
            while len(self.trainers) > trainers:
                self.trainers.pop().stopping.set()     # counts its partial batch as discarded
            while self.num_agents < agents:
                self._start_agent(self._free_slot())
            while self.num_agents > agents:
                live = [i for i, a in enumerate(self.agents) if a is not None]
                self._stop_agent(live[-1])

    def _free_slot(self) -> int:
        """A slot with no agent, live or still finishing (its last writes must not mix with a new agent's)."""
        for _ in range(2):
            for index, handle in enumerate(self.agents):
                if handle is None and index not in self._retiring:
                    return index
            self._reap(timeout=5.0)
        raise RuntimeError("no free agent slot: stopped agents did not exit")

    def _start_agent(self, index: int) -> None:
        self._retire_slot_counters(index)
        self.generations[index] = (int(self.generations[index]) + 1) % 65536
        self.buffers.stop[index] = 0
        self.buffers.slot_busy[index] = 0
        self.buffers.error[index] = 0
        self.buffers.state[index] = 0   # a new or replacing agent starts from a zero recurrent state
        answer_reader, answer_writer = self.ctx.Pipe(duplex=False)
        seed = int(self.cfg.seed) * 10007 + self.seed_counter
        self.seed_counter += 1
        process = self.ctx.Process(
            target=run_agent, name=f"ga3c-agent-{index}", daemon=True,
            args=(index, int(self.generations[index]), self.buffers.spec, self.game, seed, self.cfg.t_max,
                  float(self.cfg.learner.gamma), float(self.cfg.learner.reward_clip),
                  self.prediction_queue.writer, self.training_queue.writer, answer_reader, self.random_actions,
                  float(self.cfg.learner.gae_lambda)))
        process.start()
        answer_reader.close()  # the child has its copy; ours would keep the pipe open after the child died
        fd = os.dup(answer_writer.fileno())
        answer_writer.close()
        os.set_blocking(fd, False)  # a full or dead pipe must never block a predictor
        self.agents[index] = AgentHandle(process, fd, int(self.generations[index]))

    def _stop_agent(self, index: int, join: bool = False) -> None:
        handle = self.agents[index]
        self.agents[index] = None
        self.buffers.stop[index] = 1
        self._write_answer(handle.answer_fd, ANSWER_STOP)
        os.close(handle.answer_fd)  # EOF also wakes it
        self._retiring[index] = handle

    def _retire_slot_counters(self, index: int) -> None:
        """Fold a finished agent's counters into the run totals before its slot is reused. Steps it took but
        never shipped (a rollout cut short by its removal or death) are counted as discarded."""
        produced, shipped = int(self.buffers.produced_steps[index]), int(self.buffers.shipped_steps[index])
        self._retired_steps += produced
        self.counters.add(discarded_steps=produced - shipped)
        self.buffers.produced_steps[index] = 0
        self.buffers.shipped_steps[index] = 0

    def _reap(self, timeout: float) -> None:
        """Join stopped agents; kill those that do not finish in time."""
        deadline = time.monotonic() + timeout
        for index, handle in list(self._retiring.items()):
            handle.process.join(max(0.0, deadline - time.monotonic()))
            if handle.process.is_alive() and timeout > 0:
                handle.process.kill()
                handle.process.join(1.0)
            if not handle.process.is_alive():
                del self._retiring[index]

    # --- the data path -------------------------------------------------------------------------------
    def answer(self, index: int, generation: int) -> None:
        """Wake the agent that asked; a request of an agent replaced meanwhile is answered to nobody."""
        handle = self.agents[index]
        if handle is not None and handle.generation == generation:
            self._write_answer(handle.answer_fd, ANSWER_READY)

    @staticmethod
    def _write_answer(fd: int, byte: bytes) -> None:
        try:
            os.write(fd, byte)
        except (BrokenPipeError, BlockingIOError, OSError):
            pass  # the agent died; the watchdog replaces it

    def _produced_this_run(self) -> int:
        return self._retired_steps + int(self.buffers.produced_steps.sum())

    def produced_steps(self) -> int:
        """Agent steps taken, runs before a resume included."""
        return self.counters["produced_steps"] + self._produced_this_run()

    def frames(self) -> int:
        """Env frames (frameskip included) of all experience produced, as the paper counts them."""
        return self.counters["frames"] + self._produced_this_run() * int(self.game.get("frame_skip", 1))

    def counter_totals(self) -> dict:
        """Counters to checkpoint: frames and produced steps made whole."""
        return dict(self.counters.state_dict(), frames=self.frames(), produced_steps=self.produced_steps())

    # --- supervision ---------------------------------------------------------------------------------
    def _watch(self) -> None:
        """The supervisor: replaces dead agents, stops the run at max_frames or a stall, ticks the monitor. If it
        raised and died silently nothing would stop the run (a test run once hung so): it fails the run instead."""
        name_os_thread("watchdog")
        try:
            self._supervise()
        except BaseException as error:  # noqa: BLE001
            self.fail(f"watchdog raised {error!r}", error)

    def _supervise(self) -> None:
        max_frames = self.cfg.max_frames
        stall_seconds = float(self.cfg.get("stall_seconds") or 0)
        last_produced, last_progress = self.produced_steps(), time.monotonic()
        while not self.stopping.wait(0.25):
            produced = self.produced_steps()
            if produced != last_produced:
                last_produced, last_progress = produced, time.monotonic()
            elif stall_seconds and time.monotonic() - last_progress > stall_seconds:
                self.fail(f"no agent produced experience for {stall_seconds:.0f} s (stall_seconds): the run is stuck",
                          TimeoutError("stalled"))
            with self._lock:
                for index, handle in enumerate(self.agents):
                    if handle is not None and not handle.process.is_alive():
                        code = handle.process.exitcode
                        why = bytes(self.buffers.error[index]).split(b"\0", 1)[0].decode(errors="replace")
                        log.warning("agent %d (pid %s) died (exit code %s%s); starting a replacement", index,
                                    handle.process.pid, code, f": {why}" if why else "")
                        self.counters.add(agent_restarts=1)
                        self.agents[index] = None
                        os.close(handle.answer_fd)
                        if not self.stopping.is_set():
                            self._start_agent(index)  # its partial rollout is counted as discarded
                self._reap(timeout=0.0)
            if max_frames and self.frames() >= max_frames:
                self.request_stop(f"reached max_frames={max_frames}")
            if self.monitor is not None:
                self.monitor.tick()

    def exit_now(self) -> None:
        """A second Ctrl-C: kill every agent process and free the shared memory, waiting for nothing."""
        for handle in list(self.agents) + list(self._retiring.values()):
            if handle is not None and handle.process.is_alive():
                handle.process.kill()
        # The name only: predictor and trainer threads may still be reading the mapping, and unmapping it under
        # them crashed the process (SIGSEGV) now and then; os._exit follows at once and frees the mapping.
        self._unlink_shared_memory()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every agent, predictor and trainer; free shared memory. Bounded in time, idempotent."""
        self.request_stop(self.stop_reason or "shutdown")
        with self._lock:
            for index, handle in enumerate(self.agents):
                if handle is not None:
                    self._stop_agent(index)
            for thread in self.predictors + self.trainers:
                thread.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self.all_predictors + self.all_trainers + [self._watchdog]:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(max(0.1, deadline - time.monotonic()))
        self._reap(timeout=max(0.5, deadline - time.monotonic()))
        while True:  # batches assembled but never trained
            try:
                batch = self.batch_queue.get_nowait()
            except queue.Empty:
                break
            self.counters.add(discarded_steps=len(batch["actions"]))
        # Lightning's prefetched batch, taken from the queue but never trained.
        self.counters.add(discarded_steps=self.steps_to_learner - (self.counters["trained_steps"] -
                                                                   self._trained_at_start))
        self.steps_to_learner = self.counters["trained_steps"] - self._trained_at_start
        # Rollouts still in the training queue were produced but never trained.
        while len(records := self.training_queue.get_many(4096, timeout=0.0)):
            self.counters.add(discarded_steps=int(records["length"].sum()))
        for index in range(self.max_agents):
            if index not in self._retiring:
                self._retire_slot_counters(index)

    def _unlink_shared_memory(self) -> None:
        """Remove the segment's name from /dev/shm (the mapping stays until closed or the process ends)."""
        try:
            self.buffers.shm.unlink()
        except FileNotFoundError:  # unlinked before
            pass

    def close(self) -> None:
        """Release OS resources (after shutdown and the final summary). Safe after a failed start and twice."""
        for pipe in (self.prediction_queue, self.training_queue):
            if pipe is not None:
                pipe.close()
        # The name first: a numpy view still held somewhere (a traceback's frame) keeps the mapping from closing,
        # but must not keep the segment in /dev/shm.
        self._unlink_shared_memory()
        try:
            self.buffers.close()
        except BufferError:  # such a view: the mapping goes with the process
            log.debug("shared memory still referenced; unlinked, unmapped at exit")
