"""A stand-in for the Server around real shared memory and pipes: predictor and trainer threads run against it."""
from __future__ import annotations

import queue
import time
from types import SimpleNamespace

import numpy as np
import torch

from ga3c.monitor import Counters
from ga3c.networks import MLPActorCritic
from ga3c.shared_memory import PREDICTION_REQUEST, ROLLOUT, RecordPipe, SharedBuffers


# --- predictor and trainer threads on the real shared memory and pipes ---------------------------------
class FakeServer:
    def __init__(self, agents=8, t_max=5, obs=(4,), core=0):
        self.buffers = SharedBuffers.create(agents, 2, t_max, obs, np.float32, core)
        self.prediction_queue, self.training_queue = RecordPipe(PREDICTION_REQUEST), RecordPipe(ROLLOUT)
        self.batch_queue = queue.Queue(maxsize=100)
        self.generations = np.zeros(agents, np.uint16)
        self.learner = SimpleNamespace(model=MLPActorCritic(obs, 3, [16]), device=torch.device("cpu"), version=7,
                                       autocast_dtype=None)
        self.counters = Counters()
        self.episodes = []
        self.monitor = SimpleNamespace(record_episode=lambda score, length: self.episodes.append((score, length)))
        self.answered, self.errors = [], []

    def answer(self, index, generation):
        self.answered.append(index)

    def fail(self, message, error):
        self.errors.append(message)


def ship_rollouts(server, count, length, t_max=5):
    record = np.zeros(1, ROLLOUT)
    for i in range(count):
        agent, slot = i % 8, (i // 8) % 2
        server.buffers.returns[agent, slot, :length] = i
        server.buffers.slot_busy[agent, slot] = 1
        record["agent"], record["slot"], record["length"] = agent, slot, length
        record["episode_done"], record["episode_score"], record["episode_length"] = i == 0, 21.0, 100
        server.training_queue.put(record)


def assert_eventually(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    assert predicate()
