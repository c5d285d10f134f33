"""Probe environments: tiny image games whose right answer is known, to check that the whole pipeline
(agents, shared memory, predictors, trainers, learner) learns what it sees. No torch (agents import it).

- `CueNow-v0`: every step shows a random cue (a bright band, one of `num_actions` places) in the newest
  frame; the step is rewarded +1 when the action names the cue of the observation it was chosen on.
- `CueStack-v0`: the same, but the rewarded cue is the one shown `lag` steps earlier (default 2), visible
  only in an older frame of the stack; the newest frame shows a fresh cue that is a distractor.
- `CueRecall-v0`: a cue is shown once, then `delay` blank frames (more than the stack holds); the step after
  them pays +1 if the action names the cue. Only a policy with memory beats chance (episodes / num_actions).

A random policy scores episode_length / num_actions; a policy that sees right scores episode_length. If the
pipeline paired an observation with the next step's action, a reward with the wrong step, or scrambled the
(C, H, W) layout or the frame order, the best reachable score drops back to chance.
Use them with `game=cue` (and `game.id=ga3c.probe_envs:CueStack-v0`).
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np


class CueEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, num_actions: int = 4, size: int = 36, frames: int = 4, episode_length: int = 20,
                 lag: int = 0):
        assert 0 <= lag < frames, "the rewarded cue must still be in the stack"
        self.num_actions, self.size, self.frames = num_actions, size, frames
        self.episode_length, self.lag = episode_length, lag
        self.observation_space = gym.spaces.Box(0, 255, (frames, size, size), np.uint8)
        self.action_space = gym.spaces.Discrete(num_actions)
        self.band = size // num_actions
        self.stack = np.zeros((frames, size, size), np.uint8)
        self.cues: list[int] = []
        self.steps = 0

    def _push(self) -> np.ndarray:
        cue = int(self.np_random.integers(self.num_actions))
        self.cues.append(cue)
        frame = np.zeros((self.size, self.size), np.uint8)
        frame[cue * self.band:(cue + 1) * self.band, :] = 255
        self.stack[:-1] = self.stack[1:]
        self.stack[-1] = frame
        return self.stack.copy()

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.stack[:] = 0
        self.cues, self.steps = [], 0
        for _ in range(self.frames):  # a full stack of cues from the first step on
            obs = self._push()
        return obs, {}

    def step(self, action: int):
        target = self.cues[-1 - self.lag]
        reward = 1.0 if int(action) == target else 0.0
        self.steps += 1
        obs = self._push()
        return obs, reward, self.steps >= self.episode_length, False, {}


gym.register("CueNow-v0", entry_point=CueEnv, kwargs=dict(lag=0))
gym.register("CueStack-v0", entry_point=CueEnv, kwargs=dict(lag=2))


class CueRecallEnv(gym.Env):
    """Rounds of: a cue frame, `delay` blank frames, a decision step rewarded +1 if the action names the cue.
    With delay >= frames the cue has left the frame stack by the decision: a feed-forward policy scores
    rounds / num_actions, a recurrent one that carries its state across steps scores up to rounds."""

    metadata = {"render_modes": []}

    def __init__(self, num_actions: int = 4, size: int = 36, frames: int = 4, delay: int = 4, rounds: int = 4):
        assert delay >= frames, "the cue must leave the stack before the decision"
        self.num_actions, self.size, self.frames, self.delay, self.rounds = num_actions, size, frames, delay, rounds
        self.observation_space = gym.spaces.Box(0, 255, (frames, size, size), np.uint8)
        self.action_space = gym.spaces.Discrete(num_actions)
        self.band = size // num_actions
        self.stack = np.zeros((frames, size, size), np.uint8)
        self.steps, self.cue = 0, 0

    def _push(self, cue: int | None) -> np.ndarray:
        frame = np.zeros((self.size, self.size), np.uint8)
        if cue is not None:
            frame[cue * self.band:(cue + 1) * self.band, :] = 255
        self.stack[:-1] = self.stack[1:]
        self.stack[-1] = frame
        return self.stack.copy()

    def _next_frame(self) -> np.ndarray:
        if self.steps % (self.delay + 2) == 0:   # a round begins: a new cue
            self.cue = int(self.np_random.integers(self.num_actions))
            return self._push(self.cue)
        return self._push(None)

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.stack[:] = 0
        self.steps = 0
        return self._next_frame(), {}

    def step(self, action: int):
        decision = self.steps % (self.delay + 2) == self.delay + 1
        reward = 1.0 if decision and int(action) == self.cue else 0.0
        self.steps += 1
        done = self.steps >= self.rounds * (self.delay + 2)
        return self._next_frame(), reward, done, False, {}


gym.register("CueRecall-v0", entry_point=CueRecallEnv)

