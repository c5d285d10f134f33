"""An agent process: plays one env, never holds the network.

Each step it writes its observation into its rollout slot in shared memory, puts an 8-byte request on the
prediction queue and blocks on its answer pipe for the action a predictor chose. Every t_max steps, or when
an episode (or, optionally, a life) ends, it computes the n-step returns of the slot and puts a 32-byte
record on the training queue. Terminated episodes bootstrap 0, truncated ones and full rollouts bootstrap
V(s) of the state after the last step; the last transition of every episode is trained.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import threading
import time

import numpy as np

from ga3c.env import make_env
from ga3c.shared_memory import ANSWER_READY, PREDICTION_REQUEST, ROLLOUT, SharedBuffers

# `kill -USR1 PID` prints where a stuck process is, for every Python process of a run: this module is imported
# by the server, preloaded by the forkserver and run by every agent.
faulthandler.register(signal.SIGUSR1, all_threads=True)


class AgentStopped(Exception):
    """The server asked this agent to finish, or the server is gone."""


def discounted_returns(rewards: np.ndarray, bootstrap: float, gamma: float, values: np.ndarray | None = None,
                       lam: float = 1.0) -> np.ndarray:
    """n-step returns R_t = r_t + gamma * R_{t+1}, with R_n = bootstrap (0 after a terminal state).

    With lam < 1 and the values V(s_t) the agent acted with, lambda-returns instead (GAE(lambda) + V):
    R_t = r_t + gamma * ((1 - lam) * V(s_{t+1}) + lam * R_{t+1}); lam = 1 is the paper's n-step return.
    """
    returns = np.empty(len(rewards), np.float32)
    running = bootstrap
    for t in range(len(rewards) - 1, -1, -1):
        if lam < 1.0 and t + 1 < len(rewards):
            running = (1.0 - lam) * values[t + 1] + lam * running
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def run_agent(index: int, generation: int, spec: dict, game: dict, seed: int, t_max: int, gamma: float,
              reward_clip: float, prediction_writer, training_writer, answer_reader,
              random_actions: bool = False, gae_lambda: float = 1.0) -> None:
    """Process entry point. `random_actions` skips the network: the env-only throughput ceiling."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the server stops us
    buffers = SharedBuffers.attach(spec)
    prediction_fd, training_fd, answer_fd = (prediction_writer.fileno(), training_writer.fileno(),
                                             answer_reader.fileno())
    slots = spec["slots"]
    request = np.zeros(1, PREDICTION_REQUEST)
    request["agent"], request["generation"] = index, generation
    record = np.zeros(1, ROLLOUT)
    record["agent"], record["generation"] = index, generation
    rewards = np.zeros(t_max, np.float32)
    values = np.zeros(t_max, np.float32)  # V(s_t) as predicted, for lambda-returns
    env = make_env(game, seed)
    rng = np.random.default_rng(seed)
    num_actions = int(env.action_space.n)

    def predict(slot: int, step: int) -> tuple[int, float, int, float]:
        request["slot"], request["step"] = slot, step
        os.write(prediction_fd, request.tobytes())
        answer = os.read(answer_fd, 1)
        if answer != ANSWER_READY:  # stop byte, or b"" when the server died
            raise AgentStopped
        return (int(buffers.answer_action[index]), float(buffers.answer_value[index]),
                int(buffers.answer_version[index]), float(buffers.answer_logp[index]))

    def claim(slot: int) -> None:
        """Wait until trainers have copied this slot out (back-pressure when the learner falls behind)."""
        pause = 0.0002
        while buffers.slot_busy[index, slot]:
            if buffers.stop[index]:
                raise AgentStopped
            # Back off: a waiting agent means the learner is behind, so there is no hurry, and fewer wake-ups
            # leave the cores to it (no throughput change was measurable on Pong at 16 agents).
            time.sleep(pause)
            pause = min(pause * 2, 0.005)

    def ship(slot: int, length: int, bootstrap: float, episode_done: bool, score: float, steps: int,
             terminal: bool = False) -> None:
        """`terminal`: the last step ended the episode (or a life): nothing is bootstrapped past it."""
        buffers.returns[index, slot, :length] = discounted_returns(rewards[:length], bootstrap, gamma,
                                                                   values[:length], gae_lambda)
        buffers.rewards[index, slot, :length] = rewards[:length]
        buffers.discounts[index, slot, :length] = gamma
        if terminal:
            buffers.discounts[index, slot, length - 1] = 0.0
        buffers.bootstrap[index, slot] = bootstrap
        buffers.slot_busy[index, slot] = 1
        buffers.shipped_steps[index] += length
        record["slot"], record["length"] = slot, length
        record["episode_done"], record["episode_score"], record["episode_length"] = episode_done, score, steps
        os.write(training_fd, record.tobytes())

    recurrent = buffers.recurrent

    def begin(slot: int, new_episode: bool, predicted: bool) -> None:
        """A recurrent net's bookkeeping for a freshly claimed slot: whether its first step begins an episode,
        and the state its rollout begins with: the state before the prediction already made on its first
        observation (a full rollout's bootstrap state), else the agent's current state."""
        buffers.starts[index, slot, 0] = new_episode
        buffers.start_state[index, slot] = buffers.entry_state[index] if predicted else buffers.state[index]

    slot, step = 0, 0
    score, episode_steps = 0.0, 0
    try:
        obs, _ = env.reset(seed=seed)
        claim(slot)
        buffers.obs[index, slot, 0] = obs
        if recurrent:
            begin(slot, True, False)
        while not buffers.stop[index]:
            if random_actions:
                action = int(rng.integers(num_actions))
            else:
                action, value, version, log_prob = predict(slot, step)
                if step == t_max:  # full rollout: the state just predicted is its bootstrap
                    ship(slot, step, value, False, 0.0, 0)
                    previous, slot, step = slot, (slot + 1) % slots, 0
                    claim(slot)
                    buffers.obs[index, slot, 0] = buffers.obs[index, previous, t_max]
                    if recurrent:
                        begin(slot, False, True)
                buffers.actions[index, slot, step] = action
                buffers.versions[index, slot, step] = version
                buffers.behaviour_logp[index, slot, step] = log_prob
                values[step] = value
            obs, reward, terminated, truncated, info = env.step(action)
            buffers.produced_steps[index] += 1
            score += reward
            episode_steps += 1
            rewards[step] = np.clip(reward, -reward_clip, reward_clip) if reward_clip else reward
            step += 1
            episode_over = terminated or truncated
            if random_actions:
                if episode_over:
                    env.reset()
                step = 0
                continue
            buffers.obs[index, slot, step] = obs
            if recurrent:
                buffers.starts[index, slot, step] = 0
            if episode_over or info.get("life_lost"):
                bootstrap, terminal = 0.0, not (truncated and not terminated)
                if not terminal:  # time limit: the future still had value
                    _, bootstrap, _, _ = predict(slot, step)
                ship(slot, step, bootstrap, episode_over, score, episode_steps, terminal=terminal)
                if episode_over:
                    obs, _ = env.reset()
                    score, episode_steps = 0.0, 0
                slot, step = (slot + 1) % slots, 0
                claim(slot)
                buffers.obs[index, slot, 0] = obs
                if recurrent:
                    begin(slot, episode_over, False)
    except (AgentStopped, BrokenPipeError):
        pass
    except Exception as error:  # the env (or anything else) failed: tell the server why, then die
        message = f"{type(error).__name__}: {error}".encode(errors="replace")[:511]
        buffers.error[index, :len(message)] = np.frombuffer(message, np.uint8)
        buffers.error[index, len(message)] = 0
        raise
    finally:
        # A rollout cut short has no bootstrap value: the server counts its steps (produced, never shipped)
        # as discarded, so nothing is silently lost.
        env.close()
        buffers.close()
