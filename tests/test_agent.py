"""The agent process: n-step and lambda-returns, bootstrapping at terminal and truncated ends, the last transition trained."""
from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np

from ga3c.agent import discounted_returns, run_agent
from ga3c.shared_memory import ANSWER_READY, ANSWER_STOP, PREDICTION_REQUEST, ROLLOUT, RecordPipe, SharedBuffers


# --- n-step returns ------------------------------------------------------------------------------------
def test_returns_terminal_bootstraps_zero():
    returns = discounted_returns(np.array([1.0, 0.0, 2.0], np.float32), bootstrap=0.0, gamma=0.5)
    # R2 = 2, R1 = 0 + 0.5 * 2 = 1, R0 = 1 + 0.5 * 1 = 1.5
    np.testing.assert_allclose(returns, [1.5, 1.0, 2.0])


def test_returns_truncated_bootstraps_value():
    returns = discounted_returns(np.array([1.0, 1.0], np.float32), bootstrap=4.0, gamma=0.5)
    # R1 = 1 + 0.5 * 4 = 3, R0 = 1 + 0.5 * 3 = 2.5
    np.testing.assert_allclose(returns, [2.5, 3.0])


class Chain(gym.Env):
    """Deterministic test env: reward 1 per step; terminates after `terminate_at` steps or truncates after
    `truncate_at`. Observations count the steps."""

    def __init__(self, terminate_at: int = 1000, truncate_at: int = 1000):
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate_at, self.truncate_at, self.t = terminate_at, truncate_at, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t, action], np.float32)
        return obs, 1.0, self.t >= self.terminate_at, self.t >= self.truncate_at, {}


gym.register("tests/Chain-v0", entry_point=Chain)


def play_agent(game: dict, t_max: int, rollouts: int, value: float = 10.0, gamma: float = 0.5):
    """Run the real agent loop in a thread, acting as its predictor (action 0, V = value); return the rollouts."""
    buffers = SharedBuffers.create(1, 2, t_max, (2,), np.float32)
    predictions, training = RecordPipe(PREDICTION_REQUEST), RecordPipe(ROLLOUT)
    import multiprocessing as mp
    import os

    answer_reader, answer_writer = mp.Pipe(duplex=False)
    thread = threading.Thread(target=run_agent, args=(0, 0, buffers.spec, game, 0, t_max, gamma, 0.0,
                                                      predictions.writer, training.writer, answer_reader))
    thread.start()
    got = []
    try:
        while len(got) < rollouts:
            for request in predictions.get_many(16, timeout=0.01):
                buffers.answer_action[0], buffers.answer_value[0], buffers.answer_version[0] = 0, value, 3
                os.write(answer_writer.fileno(), ANSWER_READY)
            for record in training.get_many(16, timeout=0.01):
                s, n = int(record["slot"]), int(record["length"])
                got.append(dict(length=n, returns=buffers.returns[0, s, :n].copy(),
                                obs=buffers.obs[0, s, :n, 0].copy(), done=bool(record["episode_done"]),
                                score=float(record["episode_score"]), versions=buffers.versions[0, s, :n].copy()))
                buffers.slot_busy[0, s] = 0
    finally:
        buffers.stop[0] = 1
        os.write(answer_writer.fileno(), ANSWER_STOP)
        thread.join(5)
    assert not thread.is_alive()
    return got, buffers


def test_agent_full_rollout_bootstraps_with_value_and_trains_last_transition():
    got, _ = play_agent({"id": "tests/Chain-v0", "max_episode_frames": None}, t_max=3, rollouts=2)
    first, second = got
    assert first["length"] == 3 and not first["done"]
    # rewards 1,1,1 then bootstrap V=10: R2 = 1 + 5 = 6, R1 = 4, R0 = 3
    np.testing.assert_allclose(first["returns"], [3.0, 4.0, 6.0])
    np.testing.assert_array_equal(first["obs"], [0, 1, 2])
    np.testing.assert_array_equal(second["obs"], [3, 4, 5])  # the bootstrap state starts the next rollout
    assert (first["versions"] == 3).all()


def test_agent_terminal_bootstraps_zero():
    gym.register("tests/ChainTerm-v0", entry_point=Chain, kwargs=dict(terminate_at=2))
    got, _ = play_agent({"id": "tests/ChainTerm-v0"}, t_max=5, rollouts=2)
    assert got[0]["length"] == 2 and got[0]["done"] and got[0]["score"] == 2.0
    np.testing.assert_allclose(got[0]["returns"], [1.5, 1.0])  # last transition kept, V(terminal) = 0


def test_agent_truncation_bootstraps_value():
    gym.register("tests/ChainTrunc-v0", entry_point=Chain, kwargs=dict(truncate_at=2))
    got, _ = play_agent({"id": "tests/ChainTrunc-v0"}, t_max=5, rollouts=1)
    assert got[0]["length"] == 2 and got[0]["done"]
    np.testing.assert_allclose(got[0]["returns"], [1 + 0.5 * 6, 1 + 0.5 * 10])  # bootstrap V(s_T) = 10


def test_lambda_returns_interpolate_between_one_step_and_n_step():
    rewards, values = np.array([1.0, 1.0], np.float32), np.array([5.0, 3.0], np.float32)
    n_step = discounted_returns(rewards, 4.0, 0.5, values, lam=1.0)
    np.testing.assert_allclose(n_step, discounted_returns(rewards, 4.0, 0.5))
    one_step = discounted_returns(rewards, 4.0, 0.5, values, lam=0.0)
    np.testing.assert_allclose(one_step, [1 + 0.5 * 3.0, 1 + 0.5 * 4.0])  # r_t + gamma * V(s_{t+1})
    half = discounted_returns(rewards, 4.0, 0.5, values, lam=0.5)
    np.testing.assert_allclose(half, [1 + 0.5 * (0.5 * 3.0 + 0.5 * 3.0), 3.0])
