"""Predictor threads: one batched forward pass of the single model for every agent that is waiting."""
from __future__ import annotations

import threading
import time

import numpy as np
import torch


class Predictor(threading.Thread):
    """Takes all waiting requests (up to `max_batch`), acts for them in one forward pass, answers each agent."""

    def __init__(self, server, index: int, max_batch: int):
        super().__init__(name=f"predictor-{index}", daemon=True)
        self.server, self.max_batch = server, max_batch
        self.stopping = threading.Event()
        self.predictions = 0      # requests answered
        self.batches = 0          # forward passes
        self.busy_seconds = 0.0   # time in gather + forward + answer (the rest is waiting on the queue)
        self.compute_seconds = 0.0  # time in the forward pass alone
        self.error: BaseException | None = None

    def autocast(self, device: torch.device, batch: int) -> bool:
        """Mixed precision for this forward pass? On a CPU only from batch 16: below that, casting the weights
        costs more than bf16 saves (measured: batch 4-8 equal or slower, 16+ 1.2-1.5x faster)."""
        dtype = self.server.learner.autocast_dtype
        return dtype is not None and (device.type != "cpu" or batch >= 16)

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as error:  # noqa: BLE001 - the server reports it and stops the run
            self.error = error
            self.server.fail(f"{self.name} raised {error!r}", error)

    def _loop(self) -> None:
        server, buffers = self.server, self.server.buffers
        while not self.stopping.is_set():
            requests = server.prediction_queue.get_many(self.max_batch, timeout=0.1)
            if not len(requests):
                continue
            start = time.perf_counter()
            live = requests["generation"] == server.generations[requests["agent"]]
            requests = requests[live]  # drop requests of agents that died since
            if not len(requests):
                continue
            agents = requests["agent"].astype(np.intp)
            obs = torch.from_numpy(buffers.obs[agents, requests["slot"], requests["step"]])
            model, device = server.learner.model, server.learner.device
            compute_start = time.perf_counter()
            with torch.inference_mode(), torch.autocast(device.type, dtype=server.learner.autocast_dtype,
                                                         enabled=self.autocast(device, len(agents))):
                logits, values = model(obs.to(device, non_blocking=True))
                actions = torch.multinomial(torch.softmax(logits.float(), -1), 1).squeeze(1)
            buffers.answer_action[agents] = actions.cpu().numpy()
            buffers.answer_value[agents] = values.float().cpu().numpy()
            buffers.answer_version[agents] = server.learner.version
            self.compute_seconds += time.perf_counter() - compute_start
            for agent, generation in zip(agents, requests["generation"]):
                server.answer(int(agent), int(generation))
            self.predictions += len(agents)
            self.batches += 1
            self.busy_seconds += time.perf_counter() - start
