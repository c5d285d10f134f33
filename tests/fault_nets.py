"""Faulty nets for the reliability tests: `net._target_=tests.fault_nets.RaisingNet` / `tests.fault_nets.NaNNet`
(Hydra instantiates any importable class)."""
from __future__ import annotations

import torch

from ga3c.networks import MLPActorCritic


class RaisingNet(MLPActorCritic):
    """Raises in the predictor's forward pass (inference) after `after` calls."""

    def __init__(self, obs_shape, num_actions, hidden=(16,), after: int = 200, value_scale: float = 1.0):
        super().__init__(obs_shape, num_actions, hidden, value_scale=value_scale)
        self.calls, self.after = 0, after

    def forward(self, obs):
        if torch.is_inference_mode_enabled():
            self.calls += 1
            if self.calls > self.after:
                raise RuntimeError("injected predictor fault")
        return super().forward(obs)


class NaNNet(MLPActorCritic):
    """Returns NaN values in training forward passes after `after` of them."""

    def __init__(self, obs_shape, num_actions, hidden=(16,), after: int = 50, value_scale: float = 1.0):
        super().__init__(obs_shape, num_actions, hidden, value_scale=value_scale)
        self.calls, self.after = 0, after

    def forward(self, obs):
        logits, values = super().forward(obs)
        if torch.is_grad_enabled():
            self.calls += 1
            if self.calls > self.after:
                values = values * float("nan")
        return logits, values
