"""Trainer threads assemble training batches from the training queue; `ExperienceDataset` hands them to
Lightning's fit loop (an endless IterableDataset, so DataLoader(batch_size=None, num_workers=0))."""
from __future__ import annotations

import queue
import threading
import time

import numpy as np
import torch

from ga3c.thread_names import name_os_thread
from torch.utils.data import IterableDataset


class TrainerThread(threading.Thread):
    """Copies shipped rollouts out of shared memory (freeing the agent's slot) into a batch of at least
    `min_batch` samples (0: one rollout is a batch, as in the paper) and at most `max_batch`."""

    def __init__(self, server, index: int, min_batch: int, max_batch: int):
        super().__init__(name=f"trainer-{index}", daemon=True)
        self.server, self.min_batch, self.max_batch = server, max(min_batch, 1), max_batch
        self.stopping = threading.Event()
        self.busy_seconds = 0.0   # copying and handing over batches (the rest is waiting)
        self.error: BaseException | None = None

    def run(self) -> None:
        name_os_thread(self.name)
        try:
            self._loop()
        except BaseException as error:  # noqa: BLE001
            self.error = error
            self.server.fail(f"{self.name} raised {error!r}", error)

    # Per-sample fields copied from an agent's rollout slot; V-trace also needs each sample's place in its
    # rollout (`rollout`, `step`) and, per rollout, its length and the value of the state after it.
    STEP_FIELDS = ("obs", "actions", "returns", "versions", "rewards", "discounts", "behaviour_logp")
    ROLLOUT_FIELDS = ("bootstrap", "lengths")

    # A recurrent net's batches also carry where episodes begin and each rollout's first state.
    RECURRENT_STEP_FIELDS, RECURRENT_ROLLOUT_FIELDS = ("starts",), ("start_state",)

    def _new_batch(self) -> dict[str, np.ndarray]:
        b, spec = self.max_batch + self.server.buffers.spec["t_max"], self.server.buffers.spec
        batch = dict(obs=np.empty((b, *spec["obs_shape"]), spec["obs_dtype"]), actions=np.empty(b, np.int64),
                     returns=np.empty(b, np.float32), versions=np.empty(b, np.int64),
                     rewards=np.empty(b, np.float32), discounts=np.empty(b, np.float32),
                     behaviour_logp=np.empty(b, np.float32), rollout=np.empty(b, np.int64),
                     step=np.empty(b, np.int64), bootstrap=np.empty(b, np.float32), lengths=np.empty(b, np.int64))
        if self.server.buffers.recurrent:
            batch.update(starts=np.empty(b, np.bool_), start_state=np.empty((b, 2, spec["core"]), np.float32))
        return batch

    def _loop(self) -> None:
        server, buffers = self.server, self.server.buffers
        batch, size, rollouts = self._new_batch(), 0, 0
        while not self.stopping.is_set():
            # Take only what this batch still needs, so other trainers get the rest.
            wanted = max(1, (self.min_batch - size + buffers.spec["t_max"] - 1) // buffers.spec["t_max"])
            records = server.training_queue.get_many(wanted, timeout=0.1)
            start = time.perf_counter()
            for record in records:
                agent, slot, n = int(record["agent"]), int(record["slot"]), int(record["length"])
                if record["generation"] != server.generations[agent]:
                    server.counters.add(discarded_steps=n)  # its agent died; the slot may be reused already
                    continue
                for field in self.STEP_FIELDS:
                    batch[field][size:size + n] = getattr(buffers, field)[agent, slot, :n]
                batch["bootstrap"][rollouts] = buffers.bootstrap[agent, slot]
                if buffers.recurrent:
                    batch["starts"][size:size + n] = buffers.starts[agent, slot, :n]
                    batch["start_state"][rollouts] = buffers.start_state[agent, slot]
                buffers.slot_busy[agent, slot] = 0
                batch["rollout"][size:size + n] = rollouts
                batch["step"][size:size + n] = np.arange(n)
                batch["lengths"][rollouts] = n
                size += n
                rollouts += 1
                server.counters.add(rollouts=1)
                if record["episode_done"]:
                    server.monitor.record_episode(float(record["episode_score"]), int(record["episode_length"]))
            if size >= self.min_batch:
                per_rollout = self.ROLLOUT_FIELDS + self.RECURRENT_ROLLOUT_FIELDS
                ready = {k: torch.from_numpy(v[:rollouts if k in per_rollout else size]) for k, v in batch.items()}
                ready["horizon"] = buffers.spec["t_max"]   # the longest rollout: shapes the learner need not read back
                self.busy_seconds += time.perf_counter() - start
                while not self.stopping.is_set():
                    try:
                        server.batch_queue.put(ready, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                else:  # stopped with a batch in hand: it never reaches the learner
                    server.counters.add(discarded_steps=size)
                    return
                batch, size, rollouts = self._new_batch(), 0, 0
            else:
                self.busy_seconds += time.perf_counter() - start
        server.counters.add(discarded_steps=size)


class ExperienceDataset(IterableDataset):
    """Endless stream of the batches trainer threads assemble; ends when the server stops the run. With
    `epochs` > 1 each batch comes `epochs` times in a row (later passes marked `repeat`), one update each."""

    def __init__(self, server, epochs: int = 1):
        self.server, self.epochs = server, epochs

    def __iter__(self):
        server = self.server
        while not server.stopping.is_set():
            try:
                batch = server.batch_queue.get(timeout=0.2)
            except queue.Empty:
                server.monitor.tick()  # keep reporting while the learner starves
                continue
            server.steps_to_learner += len(batch["actions"])
            yield batch
            for repeat in range(1, self.epochs):
                if server.stopping.is_set():
                    return
                yield dict(batch, repeat=repeat)
