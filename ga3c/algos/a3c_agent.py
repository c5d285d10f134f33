"""A3C's agent processes: the loop each one runs, and the main process's handle on them.

Each agent has its own copy of the network: it acts with batch-1 forward passes of its copy, computes the gradient
of the A3C loss on its own t_max rollout, applies it to the one shared model with the shared optimizer (Hogwild:
parameters and optimizer statistics in shared memory, updated without a lock), then copies the shared weights back.
`AgentProcesses` starts, replaces and stops them; each agent writes its own row of one shared tensor (its
counters, times and loss sums) and reports episodes, readiness and errors on one queue.
"""
from __future__ import annotations

import math
import os
import queue
import signal
import time
import traceback
from typing import Callable

import numpy as np
import torch
import torch.multiprocessing as mp
from hydra.utils import instantiate

from ga3c.agent import discounted_returns
from ga3c.env import make_env
from ga3c.learner import a3c_loss, beta_at, lr_scale_at

# Per-agent statistics: one row per agent slot in a shared float64 tensor, written only by its agent. The
# losses are running sums, so the monitor reports their mean over every update of a window: one agent's last
# t_max-step rollout (what it kept before) is mostly a rollout without a reward, a value loss of ~0.
LOSSES = ("loss", "policy_loss", "value_loss", "entropy", "grad_norm")
STATS = ("produced_steps", "trained_steps", "updates", "forwards", "episodes", "lag_sum",
         "env_seconds", "forward_seconds", "train_seconds", "sync_seconds", *(f"{k}_sum" for k in LOSSES))
S = {name: i for i, name in enumerate(STATS)}


# --- the agent process -----------------------------------------------------------------------------------
def schedule_at(spec: dict, trained_steps: float) -> tuple[float, float]:
    """(learning-rate factor, entropy weight) for A3C's workers after `trained_steps` samples trained by all of
    them: GA3C's schedules (lr_scale_at, beta_at), counted in the same samples. A GA3C update trains a batch of
    at least training_min_batch samples, an A3C update one rollout of at most t_max, so A3C's update count is
    its samples over GA3C's batch: both warm up, decay and anneal over the same frames."""
    update = trained_steps / max(int(spec.get("samples_per_update") or 1), 1)
    return (lr_scale_at(update, int(spec.get("warmup_updates", 0)), int(spec.get("lr_decay_updates", 0)),
                        float(spec.get("lr_final_scale", 0.0))),
            beta_at(update, float(spec["beta"]), int(spec.get("beta_decay_updates", 0)),
                    float(spec.get("beta_final", 0.001)), int(spec.get("beta_decay_start", 0))))


def run_a3c_agent(index: int, seed: int, spec: dict, shared_model, shared_states, stats, control, events) -> None:
    """Process entry point: act, compute gradients on t_max steps, apply them to the shared model, sync."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the main process stops us
    parent = os.getppid()
    try:
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        game, t_max, gamma, reward_clip = spec["game"], spec["t_max"], spec["gamma"], spec["reward_clip"]
        lam = spec["gae_lambda"]
        env = make_env(game, seed)
        obs_shape, num_actions = tuple(env.observation_space.shape), int(env.action_space.n)
        local = instantiate(spec["net"], obs_shape=obs_shape, num_actions=num_actions)
        local.load_state_dict(shared_model.state_dict())
        optimizer = instantiate(spec["optimizer"])(shared_model.parameters())
        base_lrs = [group["lr"] for group in optimizer.param_groups]
        for p, state in zip(shared_model.parameters(), shared_states):
            optimizer.state[p] = state  # the shared statistics (Hogwild)
        local_params, shared_params = list(local.parameters()), list(shared_model.parameters())
        row = stats[index]
        obs_buffer = np.zeros((t_max + 1, *obs_shape), env.observation_space.dtype)
        actions = torch.zeros(t_max, dtype=torch.long)
        rewards = np.zeros(t_max, np.float32)
        obs, _ = env.reset(seed=seed)
        score, episode_steps = 0.0, 0
        # A recurrent net carries its state across steps and rollouts; each rollout trains by an unroll from
        # the state it began with (zeroed where an episode begins), as GA3C's learner does.
        recurrent = hasattr(local, "initial_state")
        state, new_episode = (local.initial_state(1) if recurrent else None), True
        events.put(("ready", index, None))
        while not control[0]:
            if os.getppid() != parent:
                break  # the main process is gone
            start = time.perf_counter()
            local.load_state_dict(shared_model.state_dict())  # sync with the shared model
            synced_version = float(stats[:, S["updates"]].sum())
            row[S["sync_seconds"]] += time.perf_counter() - start
            forward_seconds = env_seconds = 0.0
            length, terminal, episode_over = 0, False, False
            starts = torch.zeros(t_max + 1, 1, dtype=torch.bool)
            starts[0] = new_episode
            start_state = tuple(x.clone() for x in state) if recurrent else None
            while length < t_max:
                obs_buffer[length] = obs
                t0 = time.perf_counter()
                with torch.inference_mode():
                    if recurrent:
                        logits, _, state = local.step(torch.from_numpy(obs_buffer[length:length + 1]), state,
                                                      starts[length])
                    else:
                        logits, _ = local(torch.from_numpy(obs_buffer[length:length + 1]))
                    action = int(torch.multinomial(torch.softmax(logits.float(), -1), 1))
                t1 = time.perf_counter()
                obs, reward, terminated, truncated, info = env.step(action)
                env_seconds += time.perf_counter() - t1
                forward_seconds += t1 - t0
                actions[length] = action
                score += reward
                episode_steps += 1
                rewards[length] = np.clip(reward, -reward_clip, reward_clip) if reward_clip else reward
                length += 1
                episode_over = terminated or truncated
                if episode_over or info.get("life_lost"):
                    terminal = terminated or bool(info.get("life_lost"))  # a time limit still bootstraps
                    break
            obs_buffer[length] = obs  # the state after the rollout: its value is the bootstrap
            row[S["produced_steps"]] += length
            row[S["forwards"]] += length
            row[S["forward_seconds"]] += forward_seconds
            row[S["env_seconds"]] += env_seconds
            new_episode = episode_over
            if episode_over:
                events.put(("episode", score, episode_steps))
                row[S["episodes"]] += 1
                obs, _ = env.reset()
                score, episode_steps = 0.0, 0
            # One forward pass over the rollout and the state after it: the policy and values to train, and
            # the bootstrap V(s_{t+n}) from the same (pre-update) copy, as Mnih et al. compute it.
            start = time.perf_counter()
            if recurrent:
                logits, values, _ = local(torch.from_numpy(obs_buffer[:length + 1]).unsqueeze(1), start_state,
                                          starts[:length + 1])
                logits, values = logits[:, 0], values[:, 0]
            else:
                logits, values = local(torch.from_numpy(obs_buffer[:length + 1]))
            bootstrap = 0.0 if terminal else float(values[length].detach())
            if lam < 1.0:  # lambda-returns from the values of the same copy (GA3C: of the acting forward pass)
                returns = discounted_returns(rewards[:length], bootstrap, gamma,
                                             values[:length].detach().numpy(), lam)
            else:
                returns = discounted_returns(rewards[:length], bootstrap, gamma)
            returns = torch.from_numpy(returns)
            trained = spec.get("base_trained_steps", 0) + float(stats[:, S["trained_steps"]].sum())
            lr_scale, beta = schedule_at(spec, trained)   # GA3C's schedules, over the same samples
            for group, base_lr in zip(optimizer.param_groups, base_lrs):
                group["lr"] = base_lr * lr_scale
            parts = a3c_loss(logits[:length], values[:length], actions[:length], returns, beta,
                             spec["log_epsilon"], spec["value_coef"], spec["reduction"])
            if not torch.isfinite(parts["loss"]):
                raise FloatingPointError(f"loss is {parts['loss'].item()} in agent {index}: training stopped "
                                         "(lower the learning rate or enable learner.grad_clip)")
            for p in local_params:
                p.grad = None
            parts["loss"].backward()
            norm = torch.nn.utils.clip_grad_norm_(local_params, spec["grad_clip"] or math.inf)
            if not torch.isfinite(norm):
                raise FloatingPointError(f"gradient norm is {norm.item()} in agent {index}: training stopped")
            for local_p, shared_p in zip(local_params, shared_params):
                shared_p.grad = local_p.grad
            optimizer.step()  # Hogwild: no lock around the shared parameters and statistics
            row[S["lag_sum"]] += float(stats[:, S["updates"]].sum()) - synced_version
            for key in ("loss", "policy_loss", "value_loss", "entropy"):
                row[S[f"{key}_sum"]] += parts[key].item()
            row[S["grad_norm_sum"]] += float(norm)
            row[S["updates"]] += 1
            row[S["trained_steps"]] += length
            row[S["train_seconds"]] += time.perf_counter() - start
        env.close()
    except Exception as error:  # noqa: BLE001 - reported to the main process, which stops the run
        events.put(("error", index, f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))
        raise SystemExit(1)


# --- the main process's side -----------------------------------------------------------------------------
class AgentProcesses:
    """The A3C agent processes: starts, stops and kills them; their shared statistics and stop flag;
    the event queue, whose events `drain` hands to `on_events` (episodes, readiness, errors)."""

    def __init__(self, count: int, seed: int, spec: dict, shared_model: torch.nn.Module, shared_states: list[dict],
                 on_events: Callable[[list], None]):
        self.count, self.seed, self.spec = count, seed, spec
        self.shared_model, self.shared_states, self.on_events = shared_model, shared_states, on_events
        self.stats = torch.zeros(count, len(STATS), dtype=torch.float64).share_memory_()
        self.control = torch.zeros(1, dtype=torch.uint8).share_memory_()
        # forkserver: agents fork from a clean process that imported torch and the envs once (spawn would
        # import them again in every agent: minutes on a busy 2-core machine); no inherited threads (fork).
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(["ga3c.algos.a3c_agent"])
        self.events = self.ctx.Queue()
        self.processes: list = [None] * count
        self.seed_counter = 0
        self.restarts = 0  # agents replaced after dying without reporting an error

    def start(self, index: int) -> None:
        seed = self.seed * 10007 + self.seed_counter
        self.seed_counter += 1
        process = self.ctx.Process(target=run_a3c_agent, name=f"a3c-agent-{index}", daemon=True,
                                   args=(index, seed, self.spec, self.shared_model, self.shared_states, self.stats,
                                         self.control, self.events))
        process.start()
        self.processes[index] = process

    def stop(self, timeout: float = 5.0) -> None:
        self.control[0] = 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(p is not None and p.is_alive() for p in self.processes):
            self.drain(0.05)  # a child blocked on a full queue must be able to finish
        for process in self.processes:
            if process is not None and process.is_alive():
                process.kill()
            if process is not None:
                process.join(1.0)

    def kill(self) -> None:
        for process in self.processes:
            if process is not None and process.is_alive():
                process.kill()

    def drain(self, timeout: float) -> list:
        """The events waiting (the first one waited for up to `timeout`), after `on_events` has seen them."""
        got = []
        try:
            got.append(self.events.get(timeout=timeout))
            while True:
                got.append(self.events.get_nowait())
        except queue.Empty:
            pass
        self.on_events(got)
        return got

    def snapshot(self) -> dict:
        """The agents' statistics summed (STATS)."""
        totals = self.stats.sum(0).tolist()
        return {name: totals[i] for i, name in enumerate(STATS)}

    def close(self) -> None:
        self.events.close()
        self.events.join_thread()
