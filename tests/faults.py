"""Faulty envs for the reliability and probe tests, loaded by the run itself through ordinary config:
`game.id=tests.faults:Faulty-v0` (gymnasium imports the module, which registers the env). Free of torch: every
agent process imports it (the faulty nets, which the learner alone builds, are in tests/fault_nets.py)."""
from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np


class Faulty(gym.Env):
    """CartPole-like vectors; the first agent to reach step `GA3C_FAULT_STEP` raises (once per run, via a
    marker file), the replacement agents play on."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        marker = os.environ.get("GA3C_FAULT_MARKER")
        if marker and self.t == int(os.environ.get("GA3C_FAULT_STEP", "50")):
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL)  # only the first agent to get here
                os.close(fd)
                raise RuntimeError("injected env fault: the emulator caught fire")
            except FileExistsError:
                pass
        return np.full(4, self.t % 3 - 1, np.float32), 1.0, self.t >= 100, False, {}


gym.register("Faulty-v0", entry_point=Faulty)


class Hanging(Faulty):
    """Faulty's vectors without its fault; after `GA3C_HANG_STEP` steps in a process (default 300) every step
    blocks for ever: a stuck emulator, which only the run's stall check (stall_seconds) can notice."""

    steps_in_process = 0

    def step(self, action):
        Hanging.steps_in_process += 1
        if Hanging.steps_in_process >= int(os.environ.get("GA3C_HANG_STEP", "300")):
            while True:
                time.sleep(3600)
        self.t += 1
        return np.full(4, self.t % 3 - 1, np.float32), 1.0, self.t >= 100, False, {}


gym.register("Hanging-v0", entry_point=Hanging)


class OneStepLate(gym.Wrapper):
    """Shifts one part of the probe game's step by one step, as a pipeline bug would: `obs` (the agent sees
    the previous observation), `reward` (each reward arrives with the next step) or `action` (the env plays
    the previous action, so the action recorded is not the one that was rewarded)."""

    def __init__(self, env, part: str):
        super().__init__(env)
        self.part, self.held = part, None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.held = dict(obs=obs, reward=0.0, action=0)
        return obs, info

    def step(self, action):
        if self.part == "action":
            action, self.held["action"] = self.held["action"], action
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.part == "obs":
            obs, self.held["obs"] = self.held["obs"], obs
        if self.part == "reward":
            reward, self.held["reward"] = self.held["reward"], reward
        return obs, reward, terminated, truncated, info


def _late(part: str):
    from ga3c.probe_envs import CueEnv

    return lambda: OneStepLate(CueEnv(lag=0), part)


for _part in ("obs", "reward", "action"):
    gym.register(f"CueLate{_part.title()}-v0", entry_point=_late(_part))

