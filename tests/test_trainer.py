"""Trainer threads and the ExperienceDataset: min batch, shared queue, batch reuse."""
from __future__ import annotations

import queue
import threading
from types import SimpleNamespace

import pytest
import torch

from ga3c.learner import Learner
from ga3c.monitor import Counters
from ga3c.networks import MLPActorCritic
from ga3c.trainer import ExperienceDataset, TrainerThread


from fake_server import FakeServer, assert_eventually, ship_rollouts


def test_experience_dataset_repeats_each_batch_and_counts_its_samples_once():
    """learner.epochs = 3: each assembled batch is 3 updates in a row; samples count once (trained_steps), so
    the run's accounting (produced = trained + discarded + in flight) and its rates stay true."""
    server = SimpleNamespace(batch_queue=queue.Queue(), stopping=threading.Event(), steps_to_learner=0,
                             monitor=SimpleNamespace(tick=lambda: None))
    for n in (4, 6):
        server.batch_queue.put(dict(obs=torch.randn(n, 4), actions=torch.zeros(n, dtype=torch.long),
                                    returns=torch.zeros(n), versions=torch.zeros(n, dtype=torch.long)))
    counters = Counters()
    learner = Learner(MLPActorCritic((4,), 2, [8]), lambda p: torch.optim.SGD(p, lr=0.0), counters=counters,
                      epochs=3)
    seen = []
    for batch in ExperienceDataset(server, epochs=3):
        seen.append((len(batch["actions"]), batch.get("repeat", 0)))
        learner.on_train_batch_start(batch, 0)
        learner.on_train_batch_end(None, batch, 0)
        if len(seen) == 6:
            server.stopping.set()
    assert seen == [(4, 0), (4, 1), (4, 2), (6, 0), (6, 1), (6, 2)]
    assert counters["trained_steps"] == 10 and server.steps_to_learner == 10


@pytest.mark.parametrize("min_batch, expected", [(0, 5), (12, 15), (30, 30)])
def test_trainer_honours_training_min_batch(min_batch, expected):
    server = FakeServer()
    ship_rollouts(server, 12, 5)
    trainer = TrainerThread(server, 0, min_batch=min_batch, max_batch=64)
    trainer.start()
    try:
        assert_eventually(lambda: server.batch_queue.qsize() * expected >= 60 // expected * expected)
    finally:
        trainer.stopping.set()
        trainer.join(2)
    sizes = [len(b["actions"]) for b in list(server.batch_queue.queue)]
    assert sizes and all(size == expected for size in sizes), sizes
    assert not server.buffers.slot_busy.any()            # every copied slot is released to its agent
    assert server.episodes == [(21.0, 100)]
    produced = 60
    assert sum(sizes) + server.counters["discarded_steps"] == produced


def test_two_trainers_share_the_queue_without_losing_rollouts():
    server = FakeServer()
    ship_rollouts(server, 16, 5)
    trainers = [TrainerThread(server, i, min_batch=10, max_batch=64) for i in range(2)]
    for t in trainers:
        t.start()
    try:
        assert_eventually(lambda: sum(len(b["actions"]) for b in list(server.batch_queue.queue)) == 80)
    finally:
        for t in trainers:
            t.stopping.set()
            t.join(2)
    assert server.counters["discarded_steps"] == 0 and server.counters["rollouts"] == 16
