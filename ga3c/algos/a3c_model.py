"""A3C's shared model and optimizer (Hogwild): the parameters and optimizer statistics every agent process
updates in shared memory, built from the config (or a checkpoint), and saved as Lightning-format checkpoints
that `Learner` and a GA3C run (`ckpt_path=`) load."""
from __future__ import annotations

import os
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from ga3c.learner import RMSpropTF


def share_optimizer_state(optimizer: torch.optim.Optimizer) -> list[dict]:
    """Create the optimizer's per-parameter state now (not lazily at the first step) and move it to shared
    memory, so every agent's optimizer over the shared parameters updates the same statistics."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if isinstance(optimizer, RMSpropTF):
        for p in params:
            if not optimizer.state[p]:
                optimizer.state[p]["square_avg"] = torch.ones_like(p)  # TF1 starts its accumulator at 1
                if optimizer.param_groups[0]["momentum"]:
                    optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)
    elif not all(optimizer.state[p] for p in params):
        # Any other optimizer (Adam, torch RMSprop): one step with zero gradients builds its state and
        # leaves the parameters as they are (zero first moments give a zero update).
        saved = [p.grad for p in params]
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
        for p, grad in zip(params, saved):
            p.grad = grad
    states = []
    for p in params:
        state = optimizer.state[p]
        for key, value in list(state.items()):
            if not torch.is_tensor(value):
                state[key] = value = torch.tensor(float(value), dtype=torch.float32)
            value.share_memory_()
        states.append(state)
    return states


def lightning_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer, counters: dict,
                         wall_seconds: float, updates: int, wandb_id: str | None,
                         score_window: dict | None = None) -> dict:
    """A checkpoint in Lightning's format: `Learner.load_state_dict(ckpt["state_dict"])` and a GA3C run's
    `ckpt_path=` both take it (weights, optimizer statistics and counters; Lightning's loop state is not
    there, so a GA3C run started from it counts its own updates from 0)."""
    import pytorch_lightning as pl

    return {
        "epoch": 0, "global_step": int(updates), "pytorch-lightning_version": pl.__version__,
        # the network's weights, and the learner's entropy-floor factor at 1 (A3C has no floor)
        "state_dict": {f"model.{k}": v.detach().clone() for k, v in model.state_dict().items()}
        | {"log_beta_boost": torch.zeros(())},
        "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [],
        # GA3C's RunState restores the counters and the score window from here, so frames keep counting and
        # score_mean_100 goes on across algorithms.
        "callbacks": {"RunState": dict(counters=dict(counters), wall_seconds=float(wall_seconds), wandb_id=None,
                                       score_window=dict(score_window or {}))},
        "a3c": dict(wandb_id=wandb_id, updates=int(updates)),
    }


class SharedModel:
    """The one model and optimizer of an A3C run, in shared memory: `model` (its parameters) and `states` (the
    optimizer's per-parameter statistics) are what every agent process updates."""

    def __init__(self, cfg: DictConfig, obs_shape: tuple, num_actions: int, resumed: dict | None = None):
        self.model = instantiate(cfg.net, obs_shape=obs_shape, num_actions=num_actions)
        self.optimizer = instantiate(cfg.learner.optimizer)(self.model.parameters())
        if resumed is not None:
            self.model.load_state_dict({k.removeprefix("model."): v for k, v in resumed["state_dict"].items()
                                        if k.startswith("model.")})   # the network's, not the learner's state
            if resumed.get("optimizer_states"):
                self.optimizer.load_state_dict(resumed["optimizer_states"][0])
        self.model.share_memory()
        self.states = share_optimizer_state(self.optimizer)

    def save(self, directory: Path, name: str, counters: dict, wall_seconds: float, updates: int,
             wandb_id: str | None, score_window: dict | None = None) -> None:
        """Write `directory/name` atomically (a stop mid-write never leaves a broken checkpoint)."""
        directory.mkdir(parents=True, exist_ok=True)
        checkpoint = lightning_checkpoint(self.model, self.optimizer, counters, wall_seconds, updates, wandb_id,
                                          score_window)
        tmp = directory / f".{name}.tmp"
        torch.save(checkpoint, tmp)
        os.replace(tmp, directory / name)
