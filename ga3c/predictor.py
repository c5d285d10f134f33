"""Predictor threads: one batched forward pass of the single model for every agent that is waiting."""
from __future__ import annotations

import copy
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
        self._low_precision: torch.nn.Module | None = None  # see acting_model
        self._low_precision_version = -1
        self._low_precision_device: torch.device | None = None

    def acting_model(self) -> tuple[torch.nn.Module, int]:
        """The model to act with and the learner version it holds. Under mixed precision, a low-precision
        copy refreshed once per learner update: autocast would re-cast the weights on every pass, which at
        acting batch sizes costs more than bf16 saves (measured on CPU: the copy is 1.1-1.8x faster than
        fp32 at batch 2-32; autocast is slower below batch 16)."""
        learner = self.server.learner
        if learner.autocast_dtype is None:
            return learner.model, learner.version
        version = learner.version  # read first: the copy holds at least this version
        if self._low_precision is None or self._low_precision_device != learner.device:
            self._low_precision = copy.deepcopy(learner.model).to(learner.autocast_dtype).requires_grad_(False)
            self._low_precision_device = learner.device
        elif version != self._low_precision_version:
            with torch.no_grad():
                for target, source in zip(self._low_precision.parameters(), learner.model.parameters()):
                    target.copy_(source)
        self._low_precision_version = version
        return self._low_precision, version

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
            compute_start = time.perf_counter()
            model, version = self.acting_model()
            device = server.learner.device
            with torch.inference_mode():
                if buffers.recurrent:
                    logits, values = self._recurrent_step(model, obs.to(device), agents, requests, device)
                else:
                    logits, values = model(obs.to(device, non_blocking=True))
                log_probs = torch.log_softmax(logits.float(), -1)
                actions = torch.multinomial(log_probs.exp(), 1)
                chosen_log_probs = log_probs.gather(1, actions).squeeze(1)
                actions = actions.squeeze(1)
            buffers.answer_action[agents] = actions.cpu().numpy()
            buffers.answer_logp[agents] = chosen_log_probs.cpu().numpy()
            buffers.answer_value[agents] = values.float().cpu().numpy()
            buffers.answer_version[agents] = version
            self.compute_seconds += time.perf_counter() - compute_start
            for agent, generation in zip(agents, requests["generation"]):
                server.answer(int(agent), int(generation))
            self.predictions += len(agents)
            self.batches += 1
            self.busy_seconds += time.perf_counter() - start

    def _recurrent_step(self, model, obs: torch.Tensor, agents: np.ndarray, requests: np.ndarray, device):
        """Advance each requesting agent's recurrent state by one step (zeroed where an episode begins); keep
        the state before it, from which the agent's next rollout may begin."""
        buffers = self.server.buffers
        starts = torch.from_numpy(buffers.starts[agents, requests["slot"], requests["step"]].astype(bool)).to(device)
        state = buffers.state[agents]                                     # (B, 2, core), a copy
        state[starts.cpu().numpy()] = 0.0
        buffers.entry_state[agents] = state
        dtype = next(model.parameters()).dtype
        h, c = (torch.from_numpy(state[:, i]).to(device, dtype) for i in (0, 1))
        logits, values, (h, c) = model.step(obs, (h, c), starts)
        buffers.state[agents] = torch.stack((h, c), 1).float().cpu().numpy()
        return logits, values

