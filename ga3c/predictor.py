"""Predictor threads: one batched forward pass of the single model for every agent that is waiting."""
from __future__ import annotations

import copy
import threading
import time

import numpy as np
import torch

from ga3c.thread_names import name_os_thread


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
        name_os_thread(self.name)
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
            if buffers.recurrent:
                state, starts = self._recurrent_inputs(agents, requests)
                answers = act(model, obs, device, state, starts)
                core = state.shape[-1]
                buffers.state[agents] = answers[:, 3:].reshape(len(agents), 2, core)
            else:
                answers = act(model, obs, device)
            buffers.answer_action[agents] = answers[:, 0]
            buffers.answer_logp[agents] = answers[:, 1]
            buffers.answer_value[agents] = answers[:, 2]
            buffers.answer_version[agents] = version
            self.compute_seconds += time.perf_counter() - compute_start
            for agent, generation in zip(agents, requests["generation"]):
                server.answer(int(agent), int(generation))
            self.predictions += len(agents)
            self.batches += 1
            self.busy_seconds += time.perf_counter() - start

    def _recurrent_inputs(self, agents: np.ndarray, requests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each requesting agent's recurrent state (zeroed where an episode begins) and episode-start flags; the
        state before this step is kept, as the next rollout may begin from it."""
        buffers = self.server.buffers
        starts = buffers.starts[agents, requests["slot"], requests["step"]].astype(bool)
        state = buffers.state[agents]                                     # (B, 2, core), a copy
        state[starts] = 0.0
        buffers.entry_state[agents] = state
        return state, starts


@torch.inference_mode()
def act(model: torch.nn.Module, obs: torch.Tensor, device: torch.device, state: np.ndarray | None = None,
        starts: np.ndarray | None = None) -> np.ndarray:
    """One batched acting pass. Returns a (B, 3) float32 host array of action, log-probability and value per
    row (recurrent nets: (B, 3 + 2 x core), the new h and c after them): one device-to-host copy per batch,
    as each copy waits for all work queued on the device. Actions are sampled by Gumbel-max (the argmax of the
    log-probabilities plus Gumbel noise), which needs no host check of the probabilities and so cannot fail
    on a non-finite policy (a run whose weights went NaN is stopped by the learner's check, not here)."""
    obs = obs.to(device, non_blocking=True)
    if state is None:
        logits, values = model(obs)
    else:
        dtype = next(model.parameters()).dtype
        h, c = (torch.from_numpy(state[:, i]).to(device, dtype) for i in (0, 1))
        logits, values, (h, c) = model.step(obs, (h, c), torch.from_numpy(starts).to(device))
    log_probs = torch.log_softmax(logits.float(), -1)
    noise = torch.empty_like(log_probs).exponential_().log_()   # -Gumbel noise
    actions = (log_probs - noise).argmax(-1, keepdim=True)
    columns = [actions.float(), log_probs.gather(1, actions), values.float().unsqueeze(1)]
    if state is not None:
        columns += [h.float(), c.float()]
    return torch.cat(columns, 1).cpu().numpy()
